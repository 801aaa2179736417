package history_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRecordKeepsWinsAndStandDownsInOrder drives Record as two elections
// of one key would: every win and stand-down is in the history, in order,
// as soon as the last election's EventStopped returns.
func TestRecordKeepsWinsAndStandDownsInOrder(t *testing.T) {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "REC", TTL: 2 * time.Second})
	h, err := history.Create(context.Background(), js, "REC", 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.Retention() != history.DefaultRetention {
		t.Errorf("retention %v, want the default %v", h.Retention(), history.DefaultRetention)
	}
	for _, name := range []string{"a", "b"} {
		h.Record(election.Event{Kind: election.EventCampaigning, Key: "k", Name: name, Duration: time.Second})
	}
	h.Record(election.Event{Kind: election.EventWon, Key: "k", Name: "a", Token: 3, After: "no key"})
	h.Record(election.Event{Kind: election.EventRenewed, Key: "k", Name: "a", Duration: time.Millisecond})
	h.Record(election.Event{Kind: election.EventLost, Key: "k", Name: "a", Token: 3, Err: election.ErrStopped})
	h.Record(election.Event{Kind: election.EventStopped, Key: "k", Name: "a", Duration: time.Second})
	h.Record(election.Event{Kind: election.EventWon, Key: "k", Name: "b", Token: 5, After: "released by a"})
	h.Record(election.Event{Kind: election.EventStopped, Key: "k", Name: "b", Duration: time.Second})

	events, err := h.Events(context.Background(), "k", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range events {
		got = append(got, ev.Name+" "+ev.Kind+" "+ev.After+ev.Cause)
	}
	want := []string{"a won no key", "a stood_down " + election.ErrStopped.Error(), "b won released by a"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("the history holds %q, want %q", got, want)
	}
}

// TestRecordGivesUpWhenItCannotWrite: with its server gone, an election's
// EventStopped waits no longer than its Duration for the records still to
// send, and the history logs what it could not record.
func TestRecordGivesUpWhenItCannotWrite(t *testing.T) {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "GONE", TTL: 2 * time.Second})
	var logged bytes.Buffer
	h, err := history.Create(context.Background(), js, "GONE", 0, history.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	h.Record(election.Event{Kind: election.EventCampaigning, Key: "k", Name: "a"})
	h.Record(election.Event{Kind: election.EventWon, Key: "k", Name: "a", Token: 3})
	started := time.Now()
	h.Record(election.Event{Kind: election.EventStopped, Key: "k", Name: "a", Duration: 200 * time.Millisecond})
	if took := time.Since(started); took > time.Second {
		t.Errorf("EventStopped waited %v for the history, want about its Duration, 200ms", took)
	}
	if !strings.Contains(logged.String(), "could not record a leadership event") {
		t.Errorf("nothing logged about the lost record: %q", logged.String())
	}
}

// TestRecordWarnsOnceWhenItCannotWrite: a History that cannot write (here
// its connection is closed) logs its first failure as a warning, with the
// error, and every later one, over several elections' wins and stand-downs,
// at debug level only.
func TestRecordWarnsOnceWhenItCannotWrite(t *testing.T) {
	s := testenv.Server(t)
	nc, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DENY", TTL: 2 * time.Second})
	var logged lockedBuffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h, err := history.Create(context.Background(), js, "DENY", 0, history.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	for _, name := range []string{"a", "b"} {
		h.Record(election.Event{Kind: election.EventCampaigning, Key: "k", Name: name})
	}
	for token := uint64(1); token <= 6; token++ {
		name := []string{"a", "b"}[token%2]
		h.Record(election.Event{Kind: election.EventWon, Key: "k", Name: name, Token: token, After: "no key"})
		h.Record(election.Event{Kind: election.EventLost, Key: "k", Name: name, Token: token, Err: election.ErrStopped})
	}
	testenv.Eventually(t, "later failures logged at debug level", 10*time.Second, func() bool {
		return strings.Count(logged.String(), "level=DEBUG") >= 2
	})
	for _, name := range []string{"a", "b"} {
		h.Record(election.Event{Kind: election.EventStopped, Key: "k", Name: name, Duration: 200 * time.Millisecond})
	}
	out := logged.String()
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "connection closed") || strings.Contains(out, "permission") {
		t.Errorf("the warning does not give the error, or blames a permission:\n%s", out)
	}
	if n := strings.Count(out, "level=DEBUG"); n < 2 {
		t.Errorf("%d failures logged at debug level, want the later ones (2 or more):\n%s", n, out)
	}
}

// lockedBuffer is a log's output that the test reads while the recorder
// writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestCreateAndOpenRefuseBadInput: a bucket without a history, a bad name
// and a short retention each get an error naming what is wrong; a second
// Create opens the history as it is.
func TestCreateAndOpenRefuseBadInput(t *testing.T) {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	if _, err := history.Open(context.Background(), js, "NONE"); !errors.Is(err, history.ErrNoHistory) ||
		!strings.Contains(err.Error(), "election bucket create --bucket NONE --history") {
		t.Errorf("Open of a bucket without a history: %v, want ErrNoHistory saying how to create one", err)
	}
	if _, err := history.Create(context.Background(), js, "NONE", time.Second); !errors.Is(err, history.ErrInvalidRetention) {
		t.Errorf("Create keeping a second: %v, want ErrInvalidRetention", err)
	}
	if _, err := history.Create(context.Background(), js, "bad name", 0); !errors.Is(err, election.ErrBucketConfig) {
		t.Errorf("Create with a bad bucket name: %v, want ErrBucketConfig", err)
	}
	h, err := history.Create(context.Background(), js, "NONE", time.Hour)
	if err != nil || h.Retention() != time.Hour {
		t.Fatalf("Create for an hour: %v, %v", h, err)
	}
	again, err := history.Create(context.Background(), js, "NONE", 0)
	if err != nil || again.Retention() != time.Hour {
		t.Errorf("Create again: retention %v, %v; want the existing stream, an hour", again.Retention(), err)
	}
}

// TestAWinOverAReleaseComesAfterTheStandDownBeforeIt stores records as two
// machines' trips to the server can: the successor's win over a's release
// first, a's stand-down (sent at once, so with no delay to date it back)
// after it. The history still shows a's stand-down first, for a writes the
// release only after it stood down; so for a draining mark. A win over no
// key is left where its date puts it: nothing but the clocks orders it
// after the tenure before.
func TestAWinOverAReleaseComesAfterTheStandDownBeforeIt(t *testing.T) {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CAUSAL", TTL: 2 * time.Second})
	h, err := history.Create(context.Background(), js, "CAUSAL", 0)
	if err != nil {
		t.Fatal(err)
	}
	store := func(ev history.Event) {
		t.Helper()
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(context.Background(), "kvelect.history.CAUSAL."+ev.Key, data); err != nil {
			t.Fatal(err)
		}
	}
	afters := map[string]string{"released": "released by a", "drained": "drained by a", "aged": "no key"}
	for key, after := range afters {
		store(history.Event{Key: key, Name: "a", Kind: history.Won, Token: 1, After: "no key"})
		store(history.Event{Key: key, Name: "b", Kind: history.Won, Token: 9, After: after})
		store(history.Event{Key: key, Name: "a", Kind: history.StoodDown, Token: 1, Cause: "stopped"})
		store(history.Event{Key: key, Name: "b", Kind: history.StoodDown, Token: 9, Cause: "stopped"})
	}
	for key, want := range map[string]string{
		"released": "a won; a stood_down; b won; b stood_down",
		"drained":  "a won; a stood_down; b won; b stood_down",
		"aged":     "a won; b won; a stood_down; b stood_down",
	} {
		events, err := h.Events(context.Background(), key, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range events {
			got = append(got, ev.Name+" "+ev.Kind)
		}
		if strings.Join(got, "; ") != want {
			t.Errorf("key %s: the history shows %q, want %q", key, strings.Join(got, "; "), want)
		}
	}
}
