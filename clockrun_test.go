package election

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// eventLog keeps an election's events for a test to wait on.
type eventLog struct {
	mu      sync.Mutex
	events  []Event
	changed chan struct{} // buffered 1
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{}, 1)} }

func (l *eventLog) add(ev Event) {
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// all returns the events that match.
func (l *eventLog) all(match func(Event) bool) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	for _, ev := range l.events {
		if match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// await waits until n events after the first from (an index into the log)
// match, and returns the n-th with the index after it.
func (l *eventLog) await(t *testing.T, what string, from, n int, timeout time.Duration, match func(Event) bool) (Event, int) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		seen := 0
		for i := from; i < len(l.events); i++ {
			if match(l.events[i]) {
				if seen++; seen == n {
					ev := l.events[i]
					l.mu.Unlock()
					return ev, i + 1
				}
			}
		}
		l.mu.Unlock()
		select {
		case <-l.changed:
		case <-deadline.C:
			t.Fatalf("no %s within %v", what, timeout)
		}
	}
}

func kind(k EventKind) func(Event) bool { return func(ev Event) bool { return ev.Kind == k } }

// running starts e and stops it when the test ends.
func running(t *testing.T, e *Election) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); e.Start(context.Background()) }() //nolint:errcheck // stopped below
	t.Cleanup(func() { e.Stop(); <-done })
}

// history returns the entries of key above revision rev.
func historyAbove(t *testing.T, kv jetstream.KeyValue, key string, rev uint64) []jetstream.KeyValueEntry {
	t.Helper()
	entries, err := kv.History(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.KeyValueEntry
	for _, e := range entries {
		if e.Revision() > rev {
			out = append(out, e)
		}
	}
	return out
}

// TestASuspendWhileLeadingStandsDownAtOnce: right after a renewal, the
// leader's clock reports that the machine slept 5 s (and counted none of
// it, as Linux's monotonic clock does not). IsLeader turns false at once,
// the leadership context is cancelled and OnLost runs with ErrSuspended
// within a few polls, long before the next renewal would have been due,
// and the next write is the release, never a renewal.
func TestASuspendWhileLeadingStandsDownAtOnce(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SUSPEND", TTL: 2 * time.Second, History: 64})
	clk := newSleepyClock(1)
	events := newEventLog()
	leading := make(chan context.Context, 1)
	lost := make(chan error, 1)
	a, err := NewElection(context.Background(), "a", "k", kv, WithoutSplay(), WithClock(clk),
		WithLogger(testenv.Logger(t)), WithEventHook(events.add),
		OnWon(func(ctx context.Context) {
			select {
			case leading <- ctx:
			default:
			}
			<-ctx.Done()
		}),
		OnLost(func(cause error) {
			select {
			case lost <- cause:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	running(t, a)
	var lead context.Context
	select {
	case lead = <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("a did not lead")
	}
	events.await(t, "a renewal", 0, 1, 10*time.Second, func(ev Event) bool { return ev.Kind == EventRenewed && ev.Err == nil })
	before, err := kv.Get(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}

	clk.sleep(5 * time.Second)
	slept := time.Now()
	if a.IsLeader() || a.Token() != 0 {
		t.Errorf("right after the machine slept: IsLeader %v, Token %d", a.IsLeader(), a.Token())
	}
	if _, ok := WorkDeadline(lead); ok {
		t.Error("right after the machine slept: WorkDeadline ok")
	}
	var cause error
	select {
	case cause = <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("a did not stand down")
	}
	tookLost := time.Since(slept)
	select {
	case <-lead.Done():
	default:
		t.Error("OnLost ran before the leadership context was cancelled")
	}
	if !errors.Is(cause, ErrSuspended) {
		t.Errorf("cause %v, want ErrSuspended", cause)
	}
	// The next renewal was due a campaign interval (1.5 s) after the last.
	if limit := a.timing.interval / 2; tookLost > limit {
		t.Errorf("stood down %v after the machine slept, want within %v: at once, not at the next renewal", tookLost, limit)
	}
	t.Logf("stood down %v after the machine slept: %v", tookLost.Round(time.Millisecond), cause)
	after := testenv.Poll(t, "a write after the sleep", 5*time.Second, func() ([]jetstream.KeyValueEntry, bool) {
		es := historyAbove(t, kv, "k", before.Revision())
		return es, len(es) > 0
	})
	if got := string(after[0].Value()); got != releasePrefix+"a" {
		t.Errorf("the first write over revision %d after the sleep is %q (revision %d), want the release", before.Revision(), got, after[0].Revision())
	}
}

// TestALeaderResumedFromSuspendNeverWritesOverItsSuccessor is the
// simulator's finding of a suspended leader that vouched over its
// successor's claim: a leads, its machine suspends (its clock stands
// still, its link is down) past its key's expiry, b takes over, and a
// resumes believing it is well within its validity and sees b's claim
// over its key. It must stand down for the suspend and write nothing: b
// keeps leading.
func TestALeaderResumedFromSuspendNeverWritesOverItsSuccessor(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "RESUMED", TTL: 2 * time.Second, History: 64})
	_, js2 := testenv.Connect(t, s.ClientURL())
	kv2, err := js2.KeyValue(context.Background(), "RESUMED")
	if err != nil {
		t.Fatal(err)
	}
	clk := newSleepyClock(1)
	aKV := &cutKV{KeyValue: kv}
	aEvents, bEvents := newEventLog(), newEventLog()
	a, err := NewElection(context.Background(), "a", "k", aKV, WithoutSplay(), WithClock(clk),
		WithLogger(testenv.Logger(t).With("candidate", "a")), WithEventHook(aEvents.add),
		OnWon(func(ctx context.Context) { <-ctx.Done() }))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewElection(context.Background(), "b", "k", kv2, WithoutSplay(),
		WithLogger(testenv.Logger(t).With("candidate", "b")), WithEventHook(bEvents.add),
		OnWon(func(ctx context.Context) { <-ctx.Done() }))
	if err != nil {
		t.Fatal(err)
	}
	running(t, a)
	aEvents.await(t, "a to lead", 0, 1, 10*time.Second, kind(EventWon))
	running(t, b)
	_, next := aEvents.await(t, "a renewal", 0, 1, 10*time.Second, func(ev Event) bool { return ev.Kind == EventRenewed && ev.Err == nil })

	clk.freeze()
	aKV.cut.Store(true)
	won, _ := bEvents.await(t, "b to lead", 0, 1, 10*time.Second, kind(EventWon))
	aKV.cut.Store(false)
	aKV.reopen()
	clk.resume()

	lostEv, _ := aEvents.await(t, "a to stand down", next, 1, 10*time.Second, kind(EventLost))
	if !errors.Is(lostEv.Err, ErrSuspended) {
		t.Errorf("a stood down for %v, want ErrSuspended", lostEv.Err)
	}
	// b renews past a's resumption: a wrote nothing over b's claim.
	bEvents.await(t, "two renewals of b's", 0, 2, 10*time.Second, func(ev Event) bool { return ev.Kind == EventRenewed && ev.Err == nil })
	if lostB := bEvents.all(kind(EventLost)); len(lostB) > 0 {
		t.Errorf("b lost its leadership after a resumed: %v", lostB[0].Err)
	}
	if !b.IsLeader() {
		t.Error("b does not lead")
	}
	for _, e := range historyAbove(t, kv, "k", won.Token) {
		if v := string(e.Value()); strings.Contains(v, "a") && v != "b" {
			t.Errorf("a wrote %q (revision %d, %v) over b's claim at revision %d", v, e.Revision(), e.Operation(), won.Token)
		}
	}
}
