package election

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestACheckThatTimesOutCountsOnce runs the health gate with a check that
// honours its context: its second call hangs until its context ends (a
// database call timing out at the interval) and returns ctx.Err(); every
// other call passes at once. It counts as one failure: the interval's
// passing counts it, and its late result is that same failure.
func TestACheckThatTimesOutCountsOnce(t *testing.T) {
	t.Parallel()
	const interval = 50 * time.Millisecond
	var g *healthGate
	var calls atomic.Int32
	seen := make(chan int, 1) // the streak the third call finds: what the slow second call counted
	check := func(ctx context.Context) error {
		switch calls.Add(1) {
		case 2:
			<-ctx.Done()
			return ctx.Err()
		case 3:
			seen <- g.verdict().streak
		}
		return nil
	}
	g = newHealthGate(healthConfig{check: check, interval: interval, failures: 2}, machineClock{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.run(ctx, make(chan struct{}, 1)) }()
	streak := <-seen
	cancel()
	<-done
	if streak != 1 {
		t.Errorf("one check that timed out at its interval counted as %d failures in a row: with failures 2 a leader would stand down for a single slow check", streak)
	}
}

// TestOneSlowCheckDoesNotStandALeaderDownAtFailuresTwo runs a leader with
// WithHealthCheck(check, 100ms, 2) whose check, once, hangs until its
// context ends (and passes every other time): it keeps leading.
func TestOneSlowCheckDoesNotStandALeaderDownAtFailuresTwo(t *testing.T) {
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
