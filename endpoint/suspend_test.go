package endpoint

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// leaseWatchPoll is how often an election whose clock reports suspends
// checks its lease while it leads.
const leaseWatchPoll = 100 * time.Millisecond

// suspendableHandler starts candidate "a" of key "k" on bucket, on a
// clock whose suspends the test makes (clk.Sleep), serving a handler that
// blocks until its context ends, and sends it a request. It returns the
// leadership, the handler's context, and the request's outcome: an error
// that is nats.ErrTimeout when the reply was dropped.
func suspendableHandler(t *testing.T, bucket string, clk *testenv.SuspendClock) (lead, work context.Context, asked <-chan error) {
	t.Helper()
	subject := "svc." + bucket
	started := make(chan context.Context, 1)
	h := func(ctx context.Context, req micro.Request) (Reply, error) {
		if string(req.Data()) != "block" {
			return Reply{Data: []byte("a")}, nil
		}
		started <- ctx
		<-ctx.Done()
		return Reply{Data: []byte("after the suspend")}, nil
	}
	c := startCandidate(t, bucket, "k", "a", subject, h, election.WithClock(clk))
	select {
	case lead = <-c.leading:
	case <-time.After(awaitTimeout):
		t.Fatal("a did not lead")
	}
	nc, _ := testenv.Connect(t, natsURL)
	askUntil(t, nc, subject, "a reply from a", func(*nats.Msg) bool { return true })
	answered := make(chan error, 1)
	go func() {
		msg, err := nc.Request(subject, []byte("block"), 2*time.Second)
		if err == nil {
			err = errors.New("replied " + string(msg.Data))
		}
		answered <- err
	}()
	select {
	case work = <-started:
	case <-time.After(awaitTimeout):
		t.Fatal("the handler was not called")
	}
	return lead, work, answered
}

// TestASuspendEndsTheHandlersContextAtOnce: a handler is running when the
// leader's machine reports that it slept 5 s. Go's timers, on the
// monotonic clock, count none of the sleep, so the work deadline (at a TTL
// of 10 s) is still seconds away; the handler's context must nevertheless
// end within about a lease-watch poll of the sleep, with the leadership's
// cause (ErrSuspended), and the handler's reply is dropped.
func TestASuspendEndsTheHandlersContextAtOnce(t *testing.T) {
	t.Parallel()
	bucket, _, _ := newBucketTTL(t, 10*time.Second)
	clk := &testenv.SuspendClock{}
	lead, work, asked := suspendableHandler(t, bucket, clk)

	deadline, ok := election.WorkDeadline(lead)
	if !ok {
		t.Fatal("a stopped leading before the sleep")
	}
	clk.Sleep(5 * time.Second)
	slept := time.Now()
	left := deadline.Sub(slept)
	select {
	case <-work.Done():
	case <-time.After(awaitTimeout):
		t.Fatal("the handler's context did not end")
	}
	took := time.Since(slept)
	t.Logf("the handler's context ended %v after the sleep; the work deadline was %v away (cause: %v)",
		took.Round(time.Millisecond), left.Round(time.Millisecond), context.Cause(work))
	if limit := 3 * leaseWatchPoll; took > limit {
		t.Errorf("the handler's context ended %v after the sleep, want within %v (the lease watch polls every %v): at once, not at the monotonic work deadline %v away",
			took.Round(time.Millisecond), limit, leaseWatchPoll, left.Round(time.Millisecond))
	}
	if cause := context.Cause(work); !errors.Is(cause, election.ErrSuspended) {
		t.Errorf("the handler's context's cause %v, want ErrSuspended", cause)
	}
	if err := <-asked; !errors.Is(err, nats.ErrTimeout) {
		t.Errorf("the request sent before the sleep: %v, want a timeout (the reply dropped)", err)
	}
}

// TestASuspendWhileTheWorkDrainsEndsItAtOnce: the leader's key is deleted
// while a handler runs; the leadership ends (ErrRevisionGone) and the
// handler's context lasts until the work deadline, its time to drain.
// Then the machine sleeps 5 s: in real time the work deadline passes and a
// successor may lead, while Go's timers count none of it. The handler's
// context ends within a poll of the sleep, not at the monotonic deadline.
func TestASuspendWhileTheWorkDrainsEndsItAtOnce(t *testing.T) {
	t.Parallel()
	bucket, _, kv := newBucketTTL(t, 10*time.Second)
	clk := &testenv.SuspendClock{}
	lead, work, _ := suspendableHandler(t, bucket, clk)
	deadline, ok := election.WorkDeadline(lead)
	if !ok {
		t.Fatal("a stopped leading before the delete")
	}
	if err := kv.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lead.Done():
	case <-time.After(awaitTimeout):
		t.Fatal("a did not stand down after the delete")
	}
	if work.Err() != nil {
		t.Fatalf("the handler's context ended with the leadership (%v), before its work deadline", context.Cause(work))
	}
	clk.Sleep(5 * time.Second)
	slept := time.Now()
	select {
	case <-work.Done():
	case <-time.After(awaitTimeout):
		t.Fatal("the handler's context did not end")
	}
	took := time.Since(slept)
	t.Logf("the handler's context ended %v after the sleep; its work deadline was %v away (cause: %v)",
		took.Round(time.Millisecond), deadline.Sub(slept).Round(time.Millisecond), context.Cause(work))
	if limit := 100 * time.Millisecond; took > limit {
		t.Errorf("the draining handler's context ended %v after the sleep, want within %v: its work deadline passed in real time during the sleep", took.Round(time.Millisecond), limit)
	}
	if cause := context.Cause(work); !errors.Is(cause, election.ErrSuspended) {
		t.Errorf("the handler's context's cause %v, want ErrSuspended", cause)
	}
}
