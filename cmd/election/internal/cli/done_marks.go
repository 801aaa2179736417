package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/nats-io/nats.go/jetstream"
)

// doneMark is a job's done mark as status and the dashboard show it, not
// as a leader: who ran the job, when the mark was written, and until when
// it keeps election run --once from running the job again.
type doneMark struct {
	By    string    `json:"by"`
	At    time.Time `json:"at"`
	Until time.Time `json:"until"`
	Token uint64    `json:"token,omitempty"` // of the run, when the history has it
}

func (m doneMark) String() string {
	return fmt.Sprintf("done by %s at %s, until %s", m.By, m.At.UTC().Format(time.RFC3339), m.Until.UTC().Format(time.RFC3339))
}

// keyMark returns the done mark l is, if it is one: the mark on the key,
// which lasts until it ages out a TTL after it was written.
func keyMark(l election.Leader, ttl time.Duration) (doneMark, bool) {
	by, ok := l.DoneBy()
	if !ok {
		return doneMark{}, false
	}
	return doneMark{By: by, At: l.Written, Until: l.Written.Add(ttl)}, true
}

// logMark returns the done mark the latest run in the history left on key
// (from events of key, oldest first), if it still stands at now.
func logMark(events []history.Event, now time.Time) (doneMark, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		if ev.Kind != history.Ran && ev.Kind != history.RunStarted {
			continue
		}
		if until := ev.Run().MarkUntil(); until.After(now) {
			return doneMark{By: ev.Name, At: ev.At, Until: until, Token: ev.Token}, true
		}
		return doneMark{}, false
	}
	return doneMark{}, false
}

// doneMarks returns, by key, the done mark each of leaders is, or, with
// withLog, for such keys and for one given alone (key, "" for none) that
// nobody holds, the mark the history's latest run left if it lasts longer
// (--done-for): what status shows instead of a leader.
func doneMarks(ctx context.Context, conn *connFlags, js jetstream.JetStream, bucket string, ttl time.Duration, leaders []election.Leader, key string, withLog bool, now time.Time) map[string]doneMark {
	marks := map[string]doneMark{}
	var jobs []string // keys whose runs the history may record
	for _, l := range leaders {
		if m, ok := keyMark(l, ttl); ok {
			marks[l.Key] = m
			jobs = append(jobs, l.Key)
		} else if l.Key == key && l.Name == "" {
			jobs = append(jobs, l.Key)
		}
	}
	if !withLog || len(jobs) == 0 {
		return marks
	}
	ctx, done := conn.historyContext(ctx)
	defer done()
	h, err := history.Open(ctx, js, bucket)
	if err != nil {
		return marks
	}
	for _, key := range jobs {
		events, err := h.Events(ctx, key, time.Time{})
		if err != nil {
			return marks
		}
		if m, ok := logMark(events, now); ok && m.Until.After(marks[key].Until) {
			marks[key] = m
		}
	}
	return marks
}
