package election

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestOnceWorkSpanningASuspendIsReportedInterrupted: a's Once work is
// running when a's machine suspends (its clock stands still, its link is
// down) past its key's expiry; b's Once takes the key over and runs the
// work. a resumes and its work returns nil at once. a's leadership ended
// before its work returned (IsLeader is false the moment a resumes), so by
// Once's contract a must return ErrWorkInterrupted ("If leadership ends
// ... before work returns ... returns OnceRan with an error matching
// ErrWorkInterrupted"), and must not count the run as one that "returned
// nil while this node still leads".
func TestOnceWorkSpanningASuspendIsReportedInterrupted(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACK_ONCE_SUSPEND", TTL: 2 * time.Second, History: 64})
	_, js2 := testenv.Connect(t, s.ClientURL())
	kv2, err := js2.KeyValue(context.Background(), "ATTACK_ONCE_SUSPEND")
	if err != nil {
		t.Fatal(err)
	}
	clk := newSleepyClock(1)
	aKV := &cutKV{KeyValue: kv}
	a, err := NewElection(context.Background(), "a", "job", aKV, WithoutSplay(), WithClock(clk),
		WithLogger(testenv.Logger(t).With("candidate", "a")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	b, err := NewElection(context.Background(), "b", "job", kv2, WithoutSplay(),
		WithLogger(testenv.Logger(t).With("candidate", "b")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)

	type seen struct {
		ctxErr   error
		isLeader bool
		deadline bool
	}
	started := make(chan struct{})
	proceed := make(chan struct{})
	atReturn := make(chan seen, 1)
	type result struct {
		o   OnceOutcome
		err error
	}
	aDone := make(chan result, 1)
	go func() {
		o, err := a.Once(context.Background(), 0, func(ctx context.Context) error {
			close(started)
			<-proceed
			_, ok := WorkDeadline(ctx)
			atReturn <- seen{ctxErr: ctx.Err(), isLeader: a.IsLeader(), deadline: ok}
			return nil
		})
		aDone <- result{o, err}
	}()
	select {
	case <-started:
	case <-time.After(awaitSuspendTest):
		t.Fatal("a's work did not start")
	}

	// a's machine suspends; b takes the key over once a's has aged out.
	clk.freeze()
	aKV.cut.Store(true)
	bRan := false
	bOutcome, bErr := b.Once(context.Background(), 20*time.Second, func(context.Context) error { bRan = true; return nil })
	if bOutcome != OnceRan || !bRan {
		t.Fatalf("b's Once = %v, %v, ran %v; want b to run the work while a is suspended", bOutcome, bErr, bRan)
	}

	// a resumes, and its work returns nil at once.
	aKV.cut.Store(false)
	aKV.reopen()
	clk.resume()
	close(proceed)
	at := <-atReturn
	var r result
	select {
	case r = <-aDone:
	case <-time.After(awaitSuspendTest):
		t.Fatal("a's Once did not return")
	}
	t.Logf("a's work returned seeing ctx.Err()=%v IsLeader=%v WorkDeadline ok=%v; a's Once = %v, %v; b's = %v, %v",
		at.ctxErr, at.isLeader, at.deadline, r.o, r.err, bOutcome, bErr)
	if r.o != OnceRan || !errors.Is(r.err, ErrWorkInterrupted) {
		t.Errorf("a's Once, whose leadership ended in a suspend before its work returned (IsLeader %v when it returned), = %v, %v; want ran with ErrWorkInterrupted",
			at.isLeader, r.o, r.err)
	}
	if at.ctxErr == nil && !at.isLeader {
		t.Errorf("a's work returned with its leadership context live although IsLeader was false (b led meanwhile)")
	}
}

// TestOnceWorkReturningRightAfterASuspendIsNotCountedAsLed: as the
// suspend test above, with the seam TestASuspendWhileLeadingStandsDownAtOnce
// uses: a's clock reports that the machine slept 5 s (and counted none of
// it), and a's work returns nil right then. IsLeader is false when the work
// returns: the leadership ended (ErrSuspended) before the work returned,
// and Once must say so (ErrWorkInterrupted), not mark the key done and
// report a clean run. In a real suspend the key may have aged out and
// another host run the work meanwhile; Go's timers, on the monotonic
// clock, did not see the sleep, so only the 100 ms lease poll ends the
// leadership context: Once asks IsLeader too.
func TestOnceWorkReturningRightAfterASuspendIsNotCountedAsLed(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACK_ONCE_SLEPT", TTL: 2 * time.Second, History: 64})
	clk := newSleepyClock(1)
	a, err := NewElection(context.Background(), "a", "job", kv, WithoutSplay(), WithClock(clk),
		WithLogger(testenv.Logger(t).With("candidate", "a")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	started := make(chan struct{})
	proceed := make(chan struct{})
	var ctxErr error
	var isLeader bool
	go func() {
		<-started
		clk.sleep(5 * time.Second) // the machine slept; its clock counted none of it
		close(proceed)
	}()
	o, err := a.Once(context.Background(), 0, func(ctx context.Context) error {
		close(started)
		<-proceed
		ctxErr, isLeader = ctx.Err(), a.IsLeader()
		return nil
	})
	t.Logf("a's work returned seeing ctx.Err()=%v IsLeader=%v; Once = %v, %v", ctxErr, isLeader, o, err)
	if !isLeader && !errors.Is(err, ErrWorkInterrupted) {
		t.Errorf("a's Once, whose work returned after a suspend ended its leadership (IsLeader false), = %v, %v; want ran with ErrWorkInterrupted", o, err)
	}
	if e, gerr := kv.Get(context.Background(), "job"); gerr == nil && !isLeader && string(e.Value()) == donePrefix+"a" {
		t.Errorf("the key is marked done (%q) by a run whose leadership ended before its work returned", e.Value())
	}
}

// awaitSuspendTest guards the suspend tests against a hang.
const awaitSuspendTest = 60 * time.Second
