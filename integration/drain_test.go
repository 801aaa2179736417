package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// workSpan is one tenure's work as its OnWon saw it: from the call to the
// moment it returned.
type workSpan struct {
	name       string
	start, end time.Time
}

// slowToStop is OnWon work that keeps going for drain after its context is
// cancelled, as work that flushes or finishes a batch does, and records its
// span.
type slowToStop struct {
	drain time.Duration
	mu    sync.Mutex
	spans []workSpan
	began chan workSpan // each work as it starts
}

func (w *slowToStop) onWon(name string) func(ctx context.Context) {
	return func(ctx context.Context) {
		span := workSpan{name: name, start: time.Now()}
		w.began <- span
		<-ctx.Done()
		time.Sleep(w.drain) // the work itself: it takes this long to stop
		span.end = time.Now()
		w.mu.Lock()
		w.spans = append(w.spans, span)
		w.mu.Unlock()
	}
}

// TestASuccessorStartsOnlyOnceTheLeadersWorkReturned hands the key over in
// each way that lets the next leader lead at once (a stop, a resignation,
// a transfer, and a delete the leader answers with a draining mark and then
// vouches for), with work in OnWon that takes 500 ms to stop: the next
// leader's work must start after it returned, and soon after: within
// handoverBound of its return (a few milliseconds on an idle machine; the
// bound allows for a loaded one running -race), not an announce delay
// later. The TTL is 10 s, whose work margin (723 ms) the drain fits in.
func TestASuccessorStartsOnlyOnceTheLeadersWorkReturned(t *testing.T) {
	t.Parallel()
	handovers := []struct {
		name string
		move func(t *testing.T, b *election.Bucket, admin jetstream.KeyValue, leader *election.Election, other string)
	}{
		{"stop", func(t *testing.T, _ *election.Bucket, _ jetstream.KeyValue, leader *election.Election, _ string) {
			go leader.Stop()
		}},
		{"resign", func(t *testing.T, b *election.Bucket, _ jetstream.KeyValue, _ *election.Election, _ string) {
			go b.Resign(context.Background(), "k") //nolint:errcheck // the test watches the work instead
		}},
		{"transfer", func(t *testing.T, b *election.Bucket, _ jetstream.KeyValue, _ *election.Election, other string) {
			go b.Transfer(context.Background(), "k", other) //nolint:errcheck // the test watches the work instead
		}},
		{"delete", func(t *testing.T, _ *election.Bucket, admin jetstream.KeyValue, _ *election.Election, _ string) {
			if err := admin.Delete(context.Background(), "k"); err != nil {
				t.Error(err)
			}
		}},
	}
	for _, h := range handovers {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			bucket := "DRAIN_" + h.name
			s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: bucket, TTL: 10 * time.Second})
			work := &slowToStop{drain: 500 * time.Millisecond, began: make(chan workSpan, 4)}
			elections := map[string]*election.Election{}
			var buckets []*election.Bucket
			for i, kv := range handles(t, s.ClientURL(), bucket, 2) {
				name := []string{"a", "b"}[i]
				b := openBucket(t, kv)
				buckets = append(buckets, b)
				e, err := b.NewElection(name, "k", election.WithoutSplay(), election.WithLogger(testenv.Logger(t).With("candidate", name)), election.OnWon(work.onWon(name)))
				if err != nil {
					t.Fatal(err)
				}
				elections[name] = e
				go e.Start(context.Background()) //nolint:errcheck // stopped by the bucket's Close
			}
			first := awaitWork(t, work.began).name
			other := "a"
			if first == "a" {
				other = "b"
			}
			testenv.Eventually(t, "the leader and both candidates show", awaitTimeout, func() bool {
				l, err := buckets[0].Leader(context.Background(), "k")
				candidates, _ := buckets[0].Candidates(context.Background(), "k")
				return err == nil && l.Name == first && len(candidates) == 2
			})
			moved := time.Now()
			h.move(t, buckets[0], admin, elections[first], other)
			next := awaitWork(t, work.began)
			if next.name != other {
				t.Fatalf("%s's work started again, want %s's", next.name, other)
			}
			work.mu.Lock()
			defer work.mu.Unlock()
			if len(work.spans) == 0 {
				t.Fatalf("%s's work started while %s's still ran", other, first)
			}
			gap := next.start.Sub(work.spans[0].end)
			switch {
			case gap < 0:
				t.Errorf("%s's work started %v before %s's returned", other, -gap, first)
			case gap > handoverBound:
				t.Errorf("%s's work started %v after %s's returned, want within %v", other, gap, first, handoverBound)
			default:
				t.Logf("%s: %s's work started %v after %s's returned, %v after the %s", h.name, other, gap, first, next.start.Sub(moved), h.name)
			}
		})
	}
}

// handoverBound is how soon after the old leader's work returned the next
// leader's work must start, when the old leader hands the key over.
const handoverBound = 250 * time.Millisecond

func awaitWork(t *testing.T, began <-chan workSpan) workSpan {
	t.Helper()
	select {
	case w := <-began:
		return w
	case <-time.After(awaitTimeout):
		t.Fatal("no work started")
		return workSpan{}
	}
}

// TestADrainingMarkNoReleaseFollowsIsClaimedAfterTheWorkDeadline deletes the
// key of a leader whose work does not stop (it ignores its context): the
// leader answers the delete with its draining mark and never releases. The
// other candidate claims over the mark only once the time it names has
// passed, after the old leader's WorkDeadline (the moment a supervisor kills
// such work), and leads at once then, not an announce delay later.
func TestADrainingMarkNoReleaseFollowsIsClaimedAfterTheWorkDeadline(t *testing.T) {
	t.Parallel()
	const bucket = "DRAIN_STUCK"
	ttl := 2 * time.Second
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl})
	stuck := make(chan struct{})
	type win struct {
		name, after string
		at          time.Time
	}
	wins := make(chan win, 2)
	var mu sync.Mutex
	deadlines := map[string]time.Time{} // the last WorkDeadline each leader read
	for i, kv := range handles(t, s.ClientURL(), bucket, 2) {
		name := []string{"a", "b"}[i]
		b := openBucket(t, kv)
		e, err := b.NewElection(name, "k", election.WithoutSplay(), election.WithLogger(testenv.Logger(t).With("candidate", name)),
			election.WithEventHook(func(ev election.Event) {
				if ev.Kind == election.EventWon {
					wins <- win{name: name, after: ev.After, at: time.Now()}
				}
			}),
			election.OnWon(func(leading context.Context) {
				for leading.Err() == nil { // sample the deadline as renewals move it
					if d, ok := election.WorkDeadline(leading); ok {
						mu.Lock()
						deadlines[name] = d
						mu.Unlock()
					}
					select {
					case <-leading.Done():
					case <-time.After(5 * time.Millisecond):
					}
				}
				<-stuck // the work does not stop
			}))
		if err != nil {
			t.Fatal(err)
		}
		go e.Start(context.Background()) //nolint:errcheck // stopped by the bucket's Close
	}
	t.Cleanup(func() { close(stuck) }) // before the buckets' Close, which waits for OnWon
	first := <-wins
	testenv.Eventually(t, "the leader reads its work deadline", awaitTimeout, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !deadlines[first.name].IsZero()
	})
	if err := admin.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	next := <-wins
	mu.Lock()
	deadline := deadlines[first.name]
	mu.Unlock()
	if next.name == first.name {
		t.Errorf("%s led again while its last leadership's work still ran", first.name)
	}
	if want := "drained by " + first.name; next.after != want {
		t.Errorf("%s won over %q, want %q", next.name, next.after, want)
	}
	switch late := next.at.Sub(deadline); {
	case late < 0:
		t.Errorf("%s led %v before %s's work deadline", next.name, -late, first.name)
	case late > ttl/4:
		t.Errorf("%s led %v after %s's work deadline, want within %v: the draining mark's time, not an announce delay", next.name, late, first.name, ttl/4)
	default:
		t.Logf("%s led %v after %s's work deadline", next.name, late, first.name)
	}
}
