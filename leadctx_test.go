package election

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestLeadershipContextEndsWithTheRightCause: the leadership context
// derived from context.WithoutCancel plus an AfterFunc must still end, with
// the right cause, on every way a tenure ends: Start's context cancelled
// with a cause of the program's own (ErrStopped wrapping it), Stop
// (ErrStopped), and Once's end (done, not ErrSuspended nor nil); several
// tenures on one long-lived context leave none of them running.
func TestLeadershipContextEndsWithTheRightCause(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LEADCTX", TTL: 2 * time.Second, History: 8})
	mine := errors.New("the program's own cause")

	lead := func(ctx context.Context, e *Election, leads <-chan context.Context) (context.Context, chan error) {
		done := make(chan error, 1)
		go func() { done <- e.Start(ctx) }()
		select {
		case l := <-leads:
			return l, done
		case <-time.After(10 * time.Second):
			t.Fatal("no leadership")
			return nil, nil
		}
	}
	newE := func(name string) (*Election, chan context.Context) {
		leads := make(chan context.Context, 4)
		e, err := NewElection(context.Background(), name, "k", kv, WithoutSplay(), WithLogger(testenv.Logger(t)),
			OnWon(func(ctx context.Context) { leads <- ctx; <-ctx.Done() }))
		if err != nil {
			t.Fatal(err)
		}
		return e, leads
	}

	// Start's context cancelled with a cause.
	ctx, cancel := context.WithCancelCause(context.Background())
	e, leads := newE("a")
	l, done := lead(ctx, e, leads)
	cancel(mine)
	<-done
	if cause := context.Cause(l); !errors.Is(cause, ErrStopped) || !errors.Is(cause, mine) || l.Err() == nil {
		t.Errorf("Start's context cancelled with a cause: leadership Err %v, Cause %v; want ErrStopped wrapping the cause", l.Err(), cause)
	}

	// Stop.
	e, leads = newE("b")
	l, done = lead(context.Background(), e, leads)
	e.Stop()
	<-done
	if cause := context.Cause(l); !errors.Is(cause, ErrStopped) || errors.Is(cause, ErrSuspended) || l.Err() == nil {
		t.Errorf("Stop: leadership Err %v, Cause %v; want ErrStopped", l.Err(), cause)
	}

	// Once: after it returns, the work's context is done.
	o, err := NewElection(context.Background(), "c", "k2", kv, WithoutSplay(), WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	var kept context.Context
	outcome, err := o.Once(context.Background(), 0, func(ctx context.Context) error { kept = ctx; return nil })
	if outcome != OnceRan || err != nil {
		t.Fatalf("Once = %v, %v", outcome, err)
	}
	select {
	case <-kept.Done():
	case <-time.After(time.Second):
		t.Error("Once returned; its leadership context is still live a second later")
	}
	if cause := context.Cause(kept); cause == nil || errors.Is(cause, ErrSuspended) {
		t.Errorf("Once's leadership context ended with cause %v", cause)
	}
	t.Logf("causes: Start ctx %v; Once %v", context.Cause(l), context.Cause(kept))
}
