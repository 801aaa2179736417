package election

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestASuspendJustBeforeValidityEndsWithErrSuspended: a leader whose
// renewals go unanswered (hangKV: the link hangs) is suspended for 5 s just
// before its validity deadline. On resume (its clock, like Linux's
// monotonic one, counted none of the sleep) the leadership ends, and
// context.Cause of its leadership context is ErrSuspended, whichever of the
// validity timer, the lease watch and the failed renewal ends it first:
// run's and the agent's supervisors kill the command at once only on that
// cause (supervise.go), since its work deadline passed in real time during
// the sleep.
func TestASuspendJustBeforeValidityEndsWithErrSuspended(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SUSPCAUSE", TTL: 2 * time.Second, History: 64})
	aKV := &hangKV{KeyValue: kv}
	clk := newSleepyClock(1)
	a, lead, lost := leaderOn(t, aKV, clk)
	aKV.hang.Store(true)
	// Let any renewal in flight land, then read the validity deadline that
	// no renewal will move any more.
	time.Sleep(300 * time.Millisecond)
	a.mu.Lock()
	validUntil := a.validUntil
	a.mu.Unlock()
	if validUntil.IsZero() {
		t.Fatal("a no longer leads before the suspend")
	}
	time.Sleep(clk.Real(validUntil.Sub(clk.Now())) - 3*time.Millisecond)
	clk.sleep(5 * time.Second) // suspended 5 s, resumed 3 ms before the validity deadline
	resumed := time.Now()
	select {
	case <-lead.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the leadership context was not cancelled")
	}
	took := time.Since(resumed)
	var onLost error
	select {
	case onLost = <-lost:
	case <-time.After(5 * time.Second):
	}
	cause := context.Cause(lead)
	t.Logf("the leadership context ended %v after the resume; context.Cause: %v; OnLost: %v", took.Round(time.Millisecond), cause, onLost)
	if !errors.Is(cause, ErrSuspended) {
		t.Errorf("a leader suspended 5 s before its validity deadline: context.Cause(leadership) = %v, want ErrSuspended (OnLost got %v): run's supervisor SIGTERMs and waits out the monotonic guard deadline instead of killing at once", cause, onLost)
	}
}

// hangKV is a real bucket whose Updates, once hang is set, are never
// answered: each waits until its context is done (a hung link).
type hangKV struct {
	jetstream.KeyValue
	hang atomic.Bool
}

func (k *hangKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if k.hang.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return k.KeyValue.Update(ctx, key, value, last)
}
