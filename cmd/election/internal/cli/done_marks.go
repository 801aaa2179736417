package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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

// runMark returns the done mark a record of a run (Kind history.Ran or
// history.RunStarted) leaves, if it still stands at now.
func runMark(ev history.Event, now time.Time) (doneMark, bool) {
	if until := ev.Run().MarkUntil(); until.After(now) {
		return doneMark{By: ev.Name, At: ev.At, Until: until, Token: ev.Token}, true
	}
	return doneMark{}, false
}

// logMark returns the done mark the latest run in the history left on its
// key (from events of that key, oldest first), if it still stands at now.
func logMark(events []history.Event, now time.Time) (doneMark, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		if ev := events[i]; ev.Kind == history.Ran || ev.Kind == history.RunStarted {
			return runMark(ev, now)
		}
	}
	return doneMark{}, false
}

// doneMarks returns, by key, the done mark to show instead of a leader for
// each of leaders that a mark holds, or nobody: the key's own mark, or,
// with withLog, the one the key's latest run left in the bucket's history
// when it lasts longer (--done-for), as election run --once judges it. With
// withLog and key "" (the whole bucket), leaders comes back with an entry
// (no holder) for each key whose mark stands in the history alone, its own
// mark aged out, sorted by key; else as it was.
func doneMarks(ctx context.Context, conn *connFlags, js jetstream.JetStream, bucket string, ttl time.Duration, leaders []election.Leader, key string, withLog bool, now time.Time) (map[string]doneMark, []election.Leader) {
	marks := map[string]doneMark{}
	for _, l := range leaders {
		if m, ok := keyMark(l, ttl); ok {
			marks[l.Key] = m
		}
	}
	if !withLog {
		return marks, leaders
	}
	ctx, done := conn.historyContext(ctx)
	defer done()
	return mergeLogMarks(marks, leaders, logMarks(ctx, js, bucket, key, now), key == "")
}

// mergeLogMarks adds to marks the history's marks (logged) of the keys of
// leaders that a mark holds, or nobody, where they last longer; with
// addKeys, also those of keys not among leaders, which it returns with an
// entry (no holder) for each, sorted by key.
func mergeLogMarks(marks map[string]doneMark, leaders []election.Leader, logged map[string]doneMark, addKeys bool) (map[string]doneMark, []election.Leader) {
	listed := map[string]bool{}
	for _, l := range leaders {
		listed[l.Key] = true
		_, marked := marks[l.Key]
		if m, ok := logged[l.Key]; ok && (marked || l.Name == "") && m.Until.After(marks[l.Key].Until) {
			marks[l.Key] = m
		}
	}
	if !addKeys {
		return marks, leaders
	}
	added := false
	for key, m := range logged {
		if !listed[key] {
			marks[key] = m
			leaders = append(leaders, election.Leader{Key: key})
			added = true
		}
	}
	if added {
		slices.SortFunc(leaders, func(a, b election.Leader) int { return cmp.Compare(a.Key, b.Key) })
	}
	return marks, leaders
}

// logMarks returns, by key, the done marks that stand at now in the
// bucket's history: those the latest record of each key's runs left, or of
// key alone unless it is "". It reads them with one consumer of the last
// record on each key's subject of runs (history.Event), as an observer
// may; nothing if the bucket has no history or it cannot be read.
func logMarks(ctx context.Context, js jetstream.JetStream, bucket, key string, now time.Time) map[string]doneMark {
	stream, err := js.Stream(ctx, "KVELECT_HISTORY_"+bucket)
	if err != nil {
		return nil
	}
	prefix := "kvelect.history." + bucket + "._kvelect.run." // history/runs.go
	filter := prefix + ">"
	if key != "" {
		filter = prefix + key
	}
	consumer, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject:     filter,
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		InactiveThreshold: time.Minute, // if the deletion below is lost
	})
	if err != nil {
		return nil
	}
	defer func() {
		deleteCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = stream.DeleteConsumer(deleteCtx, consumer.CachedInfo().Name)
	}()
	info, err := consumer.Info(ctx)
	if err != nil {
		return nil
	}
	marks := map[string]doneMark{}
	for pending := info.NumPending; pending > 0; {
		batch, err := consumer.Fetch(int(min(pending, 1000)), jetstream.FetchContext(ctx))
		if err != nil {
			return marks
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			meta, err := msg.Metadata()
			if err != nil {
				return marks
			}
			pending = meta.NumPending
			var ev history.Event
			if json.Unmarshal(msg.Data(), &ev) != nil {
				continue // not a record of ours
			}
			ev.Seq, ev.Recorded, ev.At = meta.Sequence.Stream, meta.Timestamp, meta.Timestamp.Add(-ev.Delay)
			if m, ok := runMark(ev, now); ok {
				marks[strings.TrimPrefix(msg.Subject(), prefix)] = m
			}
		}
		if batch.Error() != nil || got == 0 {
			break
		}
	}
	return marks
}
