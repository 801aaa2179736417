package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
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

// leaderOn runs election "a" of key "k" on kv with the clock clk (and
// opts) until the test ends, and returns it once it leads, with its
// leadership context and the causes OnLost is given.
func leaderOn(t *testing.T, kv jetstream.KeyValue, clk Clock, opts ...Option) (a *Election, lead context.Context, lost <-chan error) {
	t.Helper()
	leading := make(chan context.Context, 1)
	causes := make(chan error, 1)
	opts = append([]Option{WithoutSplay(), WithClock(clk), WithLogger(testenv.Logger(t)),
		OnWon(func(ctx context.Context) {
			select {
			case leading <- ctx:
			default:
			}
			<-ctx.Done()
		}),
		OnLost(func(cause error) {
			select {
			case causes <- cause:
			default:
			}
		})}, opts...)
	a, err := NewElection(context.Background(), "a", "k", kv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	running(t, a)
	select {
	case lead = <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("a did not lead")
	}
	return a, lead, causes
}

// historyAbove returns the entries of key above revision rev.
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
// within a few polls, long before the next renewal would have been due
// (its cause, context.Cause, is ErrSuspended too),
// and the next write is the release, never a renewal. The leader's watcher
// delivers nothing from before that renewal on, so that nothing but the
// sleep wakes the leader before its next renewal.
func TestASuspendWhileLeadingStandsDownAtOnce(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SUSPEND", TTL: 2 * time.Second, History: 64})
	aKV := &stampKV{KeyValue: kv}
	clk := newSleepyClock(1)
	events := newEventLog()
	a, lead, lost := leaderOn(t, aKV, clk, WithEventHook(events.add))
	aKV.blind.Store(true)
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
	if got := context.Cause(lead); !errors.Is(got, ErrSuspended) {
		t.Errorf("the leadership context's cause %v, want ErrSuspended", got)
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
	// b renews past a's resumption: a wrote nothing over b's claim (a
	// vouch would be the very next write).
	bEvents.await(t, "two renewals of b's", 0, 2, 10*time.Second, func(ev Event) bool { return ev.Kind == EventRenewed && ev.Err == nil })
	if lostB := lostFor(bEvents, ErrRevisionGone); len(lostB) > 0 {
		t.Errorf("b lost its leadership to another client's write after a resumed: %v", lostB[0].Err)
	}
	if after := historyAbove(t, kv, "k", won.Token); len(after) == 0 || string(after[0].Value()) != "b" {
		t.Errorf("the write over b's claim at revision %d is not b's renewal: %v", won.Token, values(after))
	}
}

// values returns the entries' values, for a message.
func values(entries []jetstream.KeyValueEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = fmt.Sprintf("%d %v %q", e.Revision(), e.Operation(), e.Value())
	}
	return out
}

// skewed is a run of a, a candidate on a clock at which a second lasts
// rate seconds of the server's, and, once started, b on the machine's
// clock.
type skewed struct {
	a, b             *Election
	aEvents, bEvents *eventLog
	logs             *syncBuffer // what a logged
}

// skewedRun starts a on a clock at rate, alone, and waits for it to lead;
// through kvOf a's bucket may be wrapped. Alone, a leads again whenever it
// loses its key for a reason of the machine's (a renewal late on a loaded
// machine).
func skewedRun(t *testing.T, bucket string, rate float64, kvOf func(jetstream.KeyValue) jetstream.KeyValue) *skewed {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: bucket, TTL: 2 * time.Second})
	aKV := kv
	if kvOf != nil {
		aKV = kvOf(kv)
	}
	r := &skewed{aEvents: newEventLog(), bEvents: newEventLog(), logs: &syncBuffer{}}
	var err error
	r.a, err = NewElection(context.Background(), "a", "k", aKV, WithoutSplay(), WithClock(newSkewedClock(1/rate)),
		WithLogger(slog.New(slog.NewTextHandler(r.logs, nil))), WithEventHook(r.aEvents.add))
	if err != nil {
		t.Fatal(err)
	}
	r.b, err = NewElection(context.Background(), "b", "k", kv, WithoutSplay(), WithEventHook(r.bEvents.add))
	if err != nil {
		t.Fatal(err)
	}
	running(t, r.a)
	r.aEvents.await(t, "a to lead", 0, 1, 10*time.Second, kind(EventWon))
	return r
}

// lostFor returns the events of log that ended a leadership for a cause
// matching target.
func lostFor(log *eventLog, target error) []Event {
	return log.all(func(ev Event) bool { return ev.Kind == EventLost && errors.Is(ev.Err, target) })
}

// countingKV counts the writes of value to the key.
type countingKV struct {
	jetstream.KeyValue
	value  string
	writes atomic.Int32
}

func (k *countingKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if string(value) == k.value {
		k.writes.Add(1)
	}
	return k.KeyValue.Update(ctx, key, value, last)
}

// measured is the established rate measurements.
func measured(ev Event) bool { return ev.Kind == EventClockRate }

// TestAClockBeyondTheRateBoundIsRefusedLeadership: a leader whose clock
// runs 6% slow or fast against the server's (beyond ClockRate by a fifth)
// is refused once it has measured that, with ErrClockRate naming the
// measured rate: it stops leading, and stands down for it if it led then.
// b, started then, leads; once b stops, leaving the key free, a claims
// nothing while its candidate records keep measuring the same.
func TestAClockBeyondTheRateBoundIsRefusedLeadership(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{1 + 1.2*ClockRate, 1 - 1.2*ClockRate} {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			t.Parallel()
			var counted *countingKV
			r := skewedRun(t, fmt.Sprintf("RATE%d", int(rate*100)), rate, func(kv jetstream.KeyValue) jetstream.KeyValue {
				counted = &countingKV{KeyValue: kv, value: "a"}
				return counted
			})
			refused, next := r.aEvents.await(t, "a measurement that refuses a", 0, 1, 30*time.Second, func(ev Event) bool {
				return measured(ev) && ev.Clock.Beyond(ClockRate)
			})
			c := refused.Clock
			if c.Rate < rate-0.005 || c.Rate > rate+0.005 || c.RateLow > rate || c.RateHigh < rate {
				t.Errorf("measured %v in [%v, %v], want %v", c.Rate, c.RateLow, c.RateHigh, rate)
			}
			figure := fmt.Sprintf("%.4f", c.Rate)
			if !errors.Is(refused.Err, ErrClockRate) || !strings.Contains(refused.Err.Error(), figure) || !strings.Contains(refused.Err.Error(), "refusing to lead") {
				t.Errorf("the refusal %v does not name the measured rate %s", refused.Err, figure)
			}
			testenv.Eventually(t, "a to stop leading", 10*time.Second, func() bool { return !r.a.IsLeader() })
			for _, ev := range lostFor(r.aEvents, ErrClockRate) {
				t.Logf("stood down: %v", ev.Err)
				if !strings.Contains(ev.Err.Error(), figure) {
					t.Errorf("the cause %q does not name the measured rate %s", ev.Err, figure)
				}
			}
			running(t, r.b)
			r.bEvents.await(t, "b to lead", 0, 1, 10*time.Second, kind(EventWon))
			before := counted.writes.Load()
			r.b.Stop()
			_, next = r.aEvents.await(t, "a measurement after b stopped", next, 1, 10*time.Second, measured)
			r.aEvents.await(t, "three more measurements of a's", next, 3, 10*time.Second, measured)
			if n := counted.writes.Load() - before; n > 0 {
				t.Errorf("a claimed the key %d times after b left it free, while its clock was refused", n)
			}
			if r.a.IsLeader() {
				t.Error("a leads again")
			}
			for _, ev := range r.aEvents.all(measured) {
				if ev.Clock.Beyond(ClockRate) && !errors.Is(ev.Err, ErrClockRate) {
					t.Errorf("a refusing measurement: %v, want ErrClockRate", ev.Err)
				}
			}
			if !strings.Contains(r.logs.String(), "refusing to lead") {
				t.Error("the log does not say a refuses to lead")
			}
		})
	}
}

// TestAClockPastHalfTheBoundWarnsAndLeads: a leader whose clock runs 3.5%
// slow is warned of (the event, the log), and leads on: it is never
// refused.
func TestAClockPastHalfTheBoundWarnsAndLeads(t *testing.T) {
	t.Parallel()
	const rate = 1 + 0.7*ClockRate
	r := skewedRun(t, "RATEWARN", rate, nil)
	aEvents, logs := r.aEvents, r.logs
	ev, _ := aEvents.await(t, "a warned measurement", 0, 1, 30*time.Second, func(ev Event) bool { return measured(ev) && ev.Err != nil })
	if !errors.Is(ev.Err, ErrClockRate) || !strings.Contains(ev.Err.Error(), "half the bound") {
		t.Errorf("the warning %v, want ErrClockRate beyond half the bound", ev.Err)
	}
	if !strings.Contains(logs.String(), "beyond the clock assumption") {
		t.Error("no warning in the log")
	}
	// Its candidate record carries the rate, for status and other hosts.
	b, err := OpenBucket(context.Background(), r.a.kv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	testenv.Poll(t, "a's candidate record to carry its clock rate", 10*time.Second, func() ([]Candidate, bool) {
		cs, _ := b.Candidates(context.Background(), "k")
		return cs, len(cs) == 1 && cs[0].ClockRate >= ev.Clock.RateLow-1e-6 && cs[0].ClockRate <= ev.Clock.RateHigh+1e-6
	})
	_, next := aEvents.await(t, "a renewal", 0, 1, 10*time.Second, kind(EventRenewed))
	aEvents.await(t, "two more renewals", next, 2, 10*time.Second, func(ev Event) bool { return ev.Kind == EventRenewed && ev.Err == nil })
	if lost := lostFor(aEvents, ErrClockRate); len(lost) > 0 {
		t.Errorf("a stood down: %v", lost[0].Err)
	}
}

// jitterKV delays each write by up to max, either on its way to the server
// (its stamp comes later) or on its way back (its answer does): round
// trips that vary as on a busy link.
type jitterKV struct {
	jetstream.KeyValue
	max time.Duration
	mu  sync.Mutex
	rng *rand.Rand
}

func (k *jitterKV) delayed(write func() (uint64, error)) (uint64, error) {
	k.mu.Lock()
	d, first := time.Duration(k.rng.Int64N(int64(k.max))), k.rng.IntN(2) == 0
	k.mu.Unlock()
	if first {
		time.Sleep(d)
	}
	rev, err := write()
	if !first {
		time.Sleep(d)
	}
	return rev, err
}

func (k *jitterKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return k.delayed(func() (uint64, error) { return k.KeyValue.Put(ctx, key, value) })
}

func (k *jitterKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	return k.delayed(func() (uint64, error) { return k.KeyValue.Update(ctx, key, value, last) })
}

// TestJitteredRoundTripsRaiseNoClockWarning: a leader whose clock runs 2%
// slow, within half the bound, writes over a link that adds up to 40 ms to
// each write, on either leg: the rate is measured, within its bounds of
// the truth, and nothing is warned of: no rate past half the bound, no
// jump.
func TestJitteredRoundTripsRaiseNoClockWarning(t *testing.T) {
	t.Parallel()
	const rate = 1.02
	r := skewedRun(t, "JITTER", rate, func(kv jetstream.KeyValue) jetstream.KeyValue {
		return &jitterKV{KeyValue: kv, max: 40 * time.Millisecond, rng: rand.New(rand.NewPCG(1, 2))}
	})
	aEvents, logs := r.aEvents, r.logs
	aEvents.await(t, "five measurements", 0, 5, 40*time.Second, measured)
	for _, ev := range aEvents.all(measured) {
		if ev.Err != nil {
			t.Errorf("a warning: %v", ev.Err)
		}
		if c := ev.Clock; c.RateLow > rate || c.RateHigh < rate {
			t.Errorf("measured %v in [%v, %v], want %v", c.Rate, c.RateLow, c.RateHigh, rate)
		}
	}
	for _, ev := range aEvents.all(kind(EventClockJump)) {
		t.Errorf("a jump reported: %v ± %v", ev.Clock.Jump, ev.Clock.JumpError)
	}
	if lost := lostFor(aEvents, ErrClockRate); len(lost) > 0 {
		t.Errorf("a stood down: %v", lost[0].Err)
	}
	if strings.Contains(logs.String(), "clock") && strings.Contains(logs.String(), "level=WARN") {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "clock") {
				t.Errorf("a clock warning in the log: %s", line)
			}
		}
	}
	rates := aEvents.all(measured)
	c := rates[len(rates)-1].Clock
	t.Logf("measured %.4f in [%.4f, %.4f] over %v", c.Rate, c.RateLow, c.RateHigh, c.Span.Round(time.Millisecond))
}

// stampKV is a bucket whose watchers deliver entries stamped shift later
// than the server stamped them, as if the stream leader changed to one
// whose clock is shift ahead, and nothing while blind.
type stampKV struct {
	jetstream.KeyValue
	shift atomic.Int64
	blind atomic.Bool
}

type shiftedEntry struct {
	jetstream.KeyValueEntry
	shift time.Duration
}

func (e shiftedEntry) Created() time.Time { return e.KeyValueEntry.Created().Add(e.shift) }

type shiftedWatcher struct {
	jetstream.KeyWatcher
	updates chan jetstream.KeyValueEntry
	stop    chan struct{}
	once    sync.Once
}

func (w *shiftedWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

func (w *shiftedWatcher) Stop() error {
	w.once.Do(func() { close(w.stop) })
	return w.KeyWatcher.Stop()
}

func (k *stampKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	inner, err := k.KeyValue.WatchFiltered(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
	w := &shiftedWatcher{KeyWatcher: inner, updates: make(chan jetstream.KeyValueEntry), stop: make(chan struct{})}
	go func() {
		defer close(w.updates)
		for e := range inner.Updates() {
			if k.blind.Load() {
				continue
			}
			if e != nil {
				e = shiftedEntry{KeyValueEntry: e, shift: time.Duration(k.shift.Load())}
			}
			select {
			case w.updates <- e:
			case <-w.stop:
				for range inner.Updates() {
				}
				return
			}
		}
	}()
	return w, nil
}

// TestAJumpOfTheServersStampsIsReported: the stamps a leader's watcher
// delivers jump 300 ms ahead, as when the stream leader changes to a
// server that far ahead (past the 100 ms the deadlines allow for), and
// later 60 ms more: each jump is reported with its size, the first with
// ErrClockOffset, and the rate measured across them stays the clocks'
// own, 1.
func TestAJumpOfTheServersStampsIsReported(t *testing.T) {
	t.Parallel()
	var skv *stampKV
	r := skewedRun(t, "JUMP", 1, func(kv jetstream.KeyValue) jetstream.KeyValue {
		skv = &stampKV{KeyValue: kv}
		return skv
	})
	aEvents, logs := r.aEvents, r.logs
	renewed := func(ev Event) bool { return ev.Kind == EventRenewed && ev.Err == nil }
	_, next := aEvents.await(t, "two renewals", 0, 2, 10*time.Second, renewed)
	for _, jump := range []time.Duration{300 * time.Millisecond, 60 * time.Millisecond} {
		skv.shift.Add(int64(jump))
		var ev Event
		ev, next = aEvents.await(t, fmt.Sprintf("a jump of %v", jump), next, 1, 10*time.Second, kind(EventClockJump))
		c := ev.Clock
		t.Logf("a jump of %v reported as %v ± %v: %v", jump, c.Jump.Round(time.Millisecond), c.JumpError.Round(time.Millisecond), ev.Err)
		if (c.Jump - jump).Abs() > c.JumpError {
			t.Errorf("a jump of %v reported as %v ± %v", jump, c.Jump, c.JumpError)
		}
		if beyond := jump > ServerClockOffset; errors.Is(ev.Err, ErrClockOffset) != beyond {
			t.Errorf("a jump of %v: %v; want ErrClockOffset: %v", jump, ev.Err, beyond)
		}
	}
	if !strings.Contains(logs.String(), "the servers' clocks disagree") {
		t.Error("no warning of the 300 ms jump in the log")
	}
	ev, _ := aEvents.await(t, "a measured rate", next, 1, 30*time.Second, measured)
	if ev.Err != nil || ev.Clock.RateLow > 1 || ev.Clock.RateHigh < 1 {
		t.Errorf("measured %v in [%v, %v] across the jumps: %v; want 1", ev.Clock.Rate, ev.Clock.RateLow, ev.Clock.RateHigh, ev.Err)
	}
	if jumps := aEvents.all(kind(EventClockJump)); len(jumps) != 2 {
		t.Errorf("%d jumps reported, want 2", len(jumps))
	}
}
