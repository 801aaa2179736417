package election

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// The drain and the announce delay with
// the leader's and the successor's clocks at opposite extremes of the clock
// assumption. The leader's clock runs slow by ρ (a span it measures as d
// lasts d·(1+ρ) of real time, the server's clock here) and the
// successor's fast by ρ (d lasts d·(1−ρ)): the successor's waits are as short
// as the assumption allows, the leader's deadlines as late.

const (
	slowRate = 1 / (1 + ClockRate) // a span of the clock lasts 1+ρ of real time
	fastRate = 1 / (1 - ClockRate) // a span of the clock lasts 1−ρ of real time
)

// toReal is the real (machine) time at which c reads at.
func (c *skewedClock) toReal(at time.Time) time.Time {
	c.mu.Lock()
	off := c.offset
	c.mu.Unlock()
	return c.origin.Add(time.Duration(float64(at.Sub(c.origin)-off) / c.rate))
}

// skewRun is what one run saw, in real time.
type skewRun struct {
	workDeadline time.Time // the leader's last WorkDeadline, converted to real time
	leadEnded    time.Time // the leader's leadership context was cancelled
	workEnded    time.Time // the leader's OnWon returned (zero: it never did before the successor led)
	successor    time.Time // the successor's OnWon began
	after        string    // how the successor says the key became free
}

// runSkewedHandover leads with "a" on a slow clock, adds "b" on a fast clock,
// waits for a renewal of a's (so that the deadline a last read is its
// latest), then: cuts a off if cut (a never sees what follows), deletes the
// key, and waits for b to lead. a's work returns at stop(its real work
// deadline), or, if stop is nil, only once the test ends.
func runSkewedHandover(t *testing.T, bucket string, cut bool, stop func(wd time.Time) time.Time) skewRun {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: bucket, TTL: 2 * time.Second})
	aClock, bClock := newSkewedClock(slowRate), newSkewedClock(fastRate)
	aKV := &cutKV{KeyValue: kv}

	var mu sync.Mutex
	var run skewRun
	var deadline time.Time // a's latest WorkDeadline, on a's clock
	renewed := make(chan struct{}, 16)
	won := make(chan struct{})
	stuck := make(chan struct{})
	a, err := NewElection(context.Background(), "a", "k", aKV, WithoutSplay(), WithClock(aClock),
		WithLogger(testenv.Logger(t).With("candidate", "a")),
		OnWon(func(leading context.Context) {
			close(won)
			for leading.Err() == nil {
				if d, ok := WorkDeadline(leading); ok {
					mu.Lock()
					if !d.Equal(deadline) {
						if !deadline.IsZero() {
							select {
							case renewed <- struct{}{}:
							default:
							}
						}
						deadline = d
						run.workDeadline = aClock.toReal(d)
					}
					mu.Unlock()
				}
				select {
				case <-leading.Done():
				case <-time.After(time.Millisecond):
				}
			}
			mu.Lock()
			run.leadEnded = time.Now()
			wd := run.workDeadline
			mu.Unlock()
			if stop == nil {
				<-stuck
				return
			}
			time.Sleep(time.Until(stop(wd)))
			mu.Lock()
			run.workEnded = time.Now()
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	bLed := make(chan struct{})
	b, err := NewElection(context.Background(), "b", "k", kv, WithoutSplay(), WithClock(bClock),
		WithLogger(testenv.Logger(t).With("candidate", "b")),
		WithEventHook(func(ev Event) {
			if ev.Kind == EventWon {
				mu.Lock()
				run.after = ev.After
				mu.Unlock()
			}
		}),
		OnWon(func() {
			mu.Lock()
			defer mu.Unlock()
			if run.successor.IsZero() { // b may lose and lead again (a renewal failing under load): its first win counts
				run.successor = time.Now()
				close(bLed)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	aDone, bDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(aDone); a.Start(context.Background()) }() //nolint:errcheck // stopped below
	<-won
	go func() { defer close(bDone); b.Start(context.Background()) }() //nolint:errcheck // stopped below
	defer func() { close(stuck); a.Stop(); b.Stop(); <-aDone; <-bDone }()
	for range 2 { // the second renewal after b began: b's watcher is long ready
		select {
		case <-renewed:
		case <-time.After(10 * time.Second):
			t.Fatal("a did not renew")
		}
	}
	if cut {
		aKV.cut.Store(true)
	}
	if err := kv.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-bLed:
	case <-time.After(15 * time.Second):
		t.Fatal("b did not lead")
	}
	mu.Lock()
	defer mu.Unlock()
	return run
}

// TestAtTheClockExtremesStuckWorkOutlastsNoSuccessor: a leader on a
// slow clock whose work never stops sees its key deleted and marks it
// draining; the successor on a fast clock claims over the mark once the
// time it names has passed. Guarantee 3: it must not lead before the old
// leader's work deadline, in real time.
func TestAtTheClockExtremesStuckWorkOutlastsNoSuccessor(t *testing.T) {
	t.Parallel()
	run := runSkewedHandover(t, "SKEW_STUCK", false, nil)
	gap := run.successor.Sub(run.workDeadline)
	t.Logf("b led %v after a's real work deadline (after %q)", gap, run.after)
	if gap < 0 {
		t.Errorf("b led %v BEFORE a's work deadline (real time), a's work still running (after %q)", -gap, run.after)
	}
}

// TestAtTheClockExtremesWorkReturningLateHandsOverAfterIt: the same, with a's work
// returning 20 ms before its work deadline (real time). Guarantee 2: b's work
// starts only after a's returned.
func TestAtTheClockExtremesWorkReturningLateHandsOverAfterIt(t *testing.T) {
	t.Parallel()
	run := runSkewedHandover(t, "SKEW_RETURN", false, func(wd time.Time) time.Time { return wd.Add(-20 * time.Millisecond) })
	if run.workEnded.IsZero() {
		t.Fatalf("b led while a's work still ran (after %q); a's work deadline was %v after b led", run.after, run.workDeadline.Sub(run.successor))
	}
	gap := run.successor.Sub(run.workEnded)
	t.Logf("b led %v after a's work returned (after %q), %v after a's work deadline", gap, run.after, run.successor.Sub(run.workDeadline))
	if gap < 0 {
		t.Errorf("b led %v before a's work returned", -gap)
	}
}

// TestAtTheClockExtremesAnUnseenDeleteWaitsOutTheWorkDeadline: a is cut off right before the
// delete (it sees nothing and writes nothing), so b claims over the removal
// and waits out the announce delay on its fast clock. Guarantees 1 and 3: b
// leads only after a's leadership context was cancelled and after a's work
// deadline, in real time.
func TestAtTheClockExtremesAnUnseenDeleteWaitsOutTheWorkDeadline(t *testing.T) {
	t.Parallel()
	run := runSkewedHandover(t, "SKEW_CUT", true, nil)
	t.Logf("b led %v after a's leadership ended, %v after a's real work deadline (after %q)",
		run.successor.Sub(run.leadEnded), run.successor.Sub(run.workDeadline), run.after)
	if run.leadEnded.IsZero() || run.successor.Before(run.leadEnded) {
		t.Errorf("b led while a still led (a's leadership ended at %v)", run.leadEnded)
	}
	if gap := run.successor.Sub(run.workDeadline); gap < 0 {
		t.Errorf("b led %v before a's work deadline (real time)", -gap)
	}
}
