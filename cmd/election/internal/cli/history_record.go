package cli

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/slogrus"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// historyDenials takes the permissions the server denies on the subjects of
// a bucket's leadership history, which is optional: such a denial never
// ends a command, and is not logged at each attempt as others are. While
// the history is being opened it ends the opening at once (a denied request
// shows itself only as a timeout); afterwards the history's own first
// failure is the one warning.
type historyDenials struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc // of the opening, while it runs
}

// isHistorySubject says whether subject is one of a leadership history's:
// its records or its stream's JetStream API.
func isHistorySubject(subject string) bool {
	return strings.HasPrefix(subject, "kvelect.history.") || strings.Contains(subject, ".KVELECT_HISTORY_")
}

// take takes the denial d if it is of a history subject.
func (h *historyDenials) take(d *deniedError) bool {
	if h == nil || !isHistorySubject(d.subject) {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		h.cancel(d)
	}
	return true
}

func (h *historyDenials) setCancel(cancel context.CancelCauseFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cancel = cancel
}

// quietHistory makes the connection leave the denials of the history's
// subjects to openHistory and the history. Call it before connect.
func (c *connFlags) quietHistory() {
	c.historyDenials = &historyDenials{}
}

// historyContext returns ctx, cancelled with the first denial of a history
// subject as its cause (see deniedOr) until done is called.
func (c *connFlags) historyContext(ctx context.Context) (_ context.Context, done func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	if c.historyDenials == nil {
		return ctx, func() { cancel(nil) }
	}
	c.historyDenials.setCancel(cancel)
	return ctx, func() {
		c.historyDenials.setCancel(nil)
		cancel(nil)
	}
}

// openHistory opens the leadership history of bucket for the elections to
// record in: nil, with one info line, when the bucket has none; nil, with
// one warning, when it cannot be opened (a denied permission, a timeout).
// The elections run the same either way. The history logs through log its
// first failure to record as a warning and later ones at debug level.
func (c *connFlags) openHistory(ctx context.Context, js jetstream.JetStream, bucket string, log *logrus.Entry) *history.History {
	ctx, done := c.historyContext(ctx)
	defer done()
	h, err := history.Open(ctx, js, bucket, history.WithLogger(slogrus.New(log.Logger)))
	switch {
	case errors.Is(err, history.ErrNoHistory):
		log.Info("the bucket keeps no leadership history: not recording one (election bucket create makes it)")
		return nil
	case err != nil:
		log.WithError(deniedOr(ctx, err)).Warn("cannot open the bucket's leadership history: not recording it; the elections run the same")
		return nil
	}
	return h
}

// formatRetention writes a retention as --history takes it: 7d, 36h,
// 1h30m, 0.
func formatRetention(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return formatSpan(d)
}
