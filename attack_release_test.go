package election

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAttackStopAfterALostRenewalAnswer: leader a (an election made with
// NewElection, not from a Bucket) has a renewal apply with its answer lost,
// and is stopped (Start's context cancelled) before its watcher delivered
// that renewal (a client cut off loses both at once; stallKV holds the
// watcher's delivery back 50 ms). adoptLostRenewal is meant to cover Stop
// (commit fb4f8ba), but runCampaigner derives the watcher's context from
// Start's, so the watcher is gone when the release waits for it: awaitAbove
// can never see the renewal, Start blocks until a's validity deadline, and
// the release then fails ("wrong last sequence"): the key is left to
// expire and b leads a TTL late. Fails 3 of 3 runs. (Liveness, not safety:
// no second leader.)
func TestAttackStopAfterALostRenewalAnswer(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	const ttl = 6 * time.Second
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACKSTOPLOST", TTL: ttl})
	stall := newStallKV(kv, "svc")

	aWon := make(chan struct{}, 4)
	a, err := NewElection(context.Background(), "a", "svc", stall, WithoutSplay(),
		WithLogger(testenv.Logger(t).With("who", "a")),
		OnWon(func() { aWon <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	aDone := make(chan error, 1)
	go func() { aDone <- a.Start(actx) }()
	<-aWon

	bWon := make(chan time.Time, 4)
	b, err := NewElection(context.Background(), "b", "svc", kv, WithoutSplay(),
		WithLogger(testenv.Logger(t).With("who", "b")),
		OnWon(func() { bWon <- time.Now() }))
	if err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	go func() { bDone <- b.Start(context.Background()) }()
	defer func() { b.Stop(); <-bDone }()
	time.Sleep(500 * time.Millisecond)

	var stopped time.Time
	stall.armed <- func() {
		stopped = time.Now()
		acancel()
		time.AfterFunc(50*time.Millisecond, stall.unstall)
	}
	select {
	case <-aDone:
	case <-time.After(2 * ttl):
		t.Fatal("a's Start did not return")
	}
	took := time.Since(stopped)
	t.Logf("a's Start returned %v after its context was cancelled", took.Round(time.Millisecond))
	select {
	case won := <-bWon:
		if d := won.Sub(stopped); d > ttl/4 {
			t.Errorf("b led %v after a was stopped, want at once (a's release)", d.Round(time.Millisecond))
		}
	case <-time.After(ttl / 4):
		e, _ := kv.Get(context.Background(), "svc")
		t.Errorf("b does not lead %v after a was stopped (Start returned after %v): a's release did not land; the key holds %q (revision %d)", ttl/4, took.Round(time.Millisecond), e.Value(), e.Revision())
	}
}

// TestAttackACheckThatTimesOutCountsTwice runs the health gate with a check
// that honours its context: its second call hangs until its context ends
// (a database call timing out at the interval) and returns ctx.Err(); every
// other call passes at once. WithHealthCheck's documentation counts such a
// check as one failure ("a check that has not returned by then failed"),
// and a leader stands down only after failures of them in a row. The run
// loop counts it twice: once when its interval passes, and once more when
// its (late) result arrives a moment after, so with failures 2 one slow
// check makes a leader stand down.
func TestAttackACheckThatTimesOutCountsTwice(t *testing.T) {
	t.Parallel()
	const interval = 50 * time.Millisecond
	var calls atomic.Int32
	check := func(ctx context.Context) error {
		if calls.Add(1) == 2 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	g := newHealthGate(healthConfig{check: check, interval: interval, failures: 2, set: true}, machineClock{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.run(ctx, make(chan struct{}, 1)) }()
	maxStreak := 0
	for end := time.Now().Add(8 * interval); time.Now().Before(end); time.Sleep(time.Millisecond) {
		maxStreak = max(maxStreak, g.verdict().streak)
	}
	cancel()
	<-done
	if maxStreak > 1 {
		t.Errorf("one check that timed out at its interval counted as %d failures in a row (calls %d): with failures 2 a leader would stand down for a single slow check", maxStreak, calls.Load())
	}
}

// TestAttackOneSlowCheckStandsALeaderDownAtFailuresTwo is the end-to-end
// effect of TestAttackACheckThatTimesOutCountsTwice: a leader with
// WithHealthCheck(check, 100ms, 2) whose check, once, hangs until its
// context ends (and passes every other time) stands down for its health.
func TestAttackOneSlowCheckStandsALeaderDownAtFailuresTwo(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACKSLOWCHECK", TTL: 4 * time.Second})
	var slow atomic.Bool
	check := func(ctx context.Context) error {
		if slow.CompareAndSwap(true, false) {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	won, lost := make(chan struct{}, 4), make(chan error, 4)
	a, err := NewElection(context.Background(), "a", "svc", kv, WithoutSplay(),
		WithHealthCheck(check, 100*time.Millisecond, 2),
		WithLogger(testenv.Logger(t)),
		OnWon(func() { won <- struct{}{} }), OnLost(func(cause error) { lost <- cause }))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Start(context.Background()) }()
	defer func() { a.Stop(); <-done }()
	<-won
	slow.Store(true)
	select {
	case cause := <-lost:
		t.Errorf("the leader stood down after one check that timed out, with failures 2: %v", cause)
	case <-time.After(time.Second):
	}
}
