package integration

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// wins records the "won the key" log records of a group's candidates.
type wins struct {
	mu      sync.Mutex
	records []map[string]string // attributes by key, as text
}

func (w *wins) Enabled(context.Context, slog.Level) bool { return true }
func (w *wins) WithAttrs(as []slog.Attr) slog.Handler    { return &withAttrs{w, as} }
func (w *wins) WithGroup(string) slog.Handler            { return w }
func (w *wins) Handle(_ context.Context, r slog.Record) error {
	return w.handle(nil, r)
}

func (w *wins) handle(attrs []slog.Attr, r slog.Record) error {
	if r.Message != "won the key" {
		return nil
	}
	rec := map[string]string{}
	for _, a := range attrs {
		rec[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { rec[a.Key] = a.Value.String(); return true })
	w.mu.Lock()
	w.records = append(w.records, rec)
	w.mu.Unlock()
	return nil
}

// withAttrs carries the attributes a logger was made With.
type withAttrs struct {
	*wins
	attrs []slog.Attr
}

func (h *withAttrs) WithAttrs(as []slog.Attr) slog.Handler {
	return &withAttrs{h.wins, append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h *withAttrs) Handle(_ context.Context, r slog.Record) error { return h.handle(h.attrs, r) }

// last returns the latest win of candidate name.
func (w *wins) last(name string) map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.records) - 1; i >= 0; i-- {
		if w.records[i]["name"] == name {
			return w.records[i]
		}
	}
	return nil
}

// On a bucket with expiry markers, a crashed leader's key leaves a marker a
// TTL after its last renewal; the watcher saw that renewal right before the
// marker, which proves every holder stood down, so the next winner announces
// at once instead of waiting a TTL more.
func TestExpiryMarkerAfterACrashLetsTheWinnerAnnounceAtOnce(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "MARKED", TTL: ttl, LimitMarkerTTL: time.Second})
	kvs, proxies := proxied(t, s, "MARKED", 3)
	log := &wins{}
	g := startGroup(t, "c", "k", kvs, election.WithLogger(slog.New(log)))
	leader := g.awaitWin()

	proxies[leader.name].Close() // a crash, as the server sees it: no release
	lost := g.awaitLoss(leader.name)
	next := g.awaitWin()
	if next.name == leader.name || !next.at.After(lost.at) {
		t.Fatalf("%s announced at %v; the crashed leader %s stood down at %v", next.name, next.at, leader.name, lost.at)
	}
	win := log.last(next.name)
	if win["after"] != "removal a TTL after the last write" || win["announce_delay"] != "0s" {
		t.Errorf("the winner's claim: %v; want it over the expiry marker, announced at once", win)
	}
}
