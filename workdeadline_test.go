package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestWorkDeadlineFollowsTheLeadership checks WorkDeadline against the
// timing it promises: 1.771 s after the leader's last write at a 2 s TTL
// and the default interval (TestDefaultTimings has the derivation's figures), later after each renewal, and no longer given once that
// leadership has ended, even while the same node leads again.
func TestWorkDeadlineFollowsTheLeadership(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DEADLINE", TTL: ttl})

	if _, ok := election.WorkDeadline(context.Background()); ok {
		t.Error("WorkDeadline of a context that is no leadership's: ok, want false")
	}
	won := make(chan context.Context, 2)
	e, err := election.NewElection(context.Background(), "a", "job", kv, election.WithoutSplay(),
		election.OnWon(func(leading context.Context) {
			won <- leading
			<-leading.Done()
		}))
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	defer func() { e.Stop(); <-done }()

	first := <-won
	wonAt := time.Now()
	d1, ok := election.WorkDeadline(first)
	if !ok {
		t.Fatal("WorkDeadline of the leadership OnWon got: not ok")
	}
	if margin := 1771 * time.Millisecond; d1.Before(started.Add(margin-time.Millisecond)) || d1.After(wonAt.Add(margin+time.Millisecond)) {
		t.Errorf("WorkDeadline %v after the start, want 1.771 s after the claim was sent: between %v and %v",
			d1.Sub(started), margin, wonAt.Sub(started)+margin)
	}
	d2 := testenv.Poll(t, "a renewal to move the work deadline", 2*ttl, func() (time.Time, bool) {
		d, ok := election.WorkDeadline(first)
		return d, ok && d.After(d1)
	})
	if d2.Sub(d1) < ttl/2 {
		t.Errorf("a renewal moved the work deadline by %v, want about the campaign interval (%v)", d2.Sub(d1), ttl*3/4)
	}

	// Deleted: this node stands down, and wins again with a new token.
	if err := kv.Delete(context.Background(), "job"); err != nil {
		t.Fatal(err)
	}
	second := <-won
	if _, ok := election.WorkDeadline(first); ok {
		t.Error("WorkDeadline of an ended leadership: ok while the node leads again, want false")
	}
	if _, ok := election.WorkDeadline(second); !ok {
		t.Error("WorkDeadline of the new leadership: not ok")
	}
	e.Stop()
	if _, ok := election.WorkDeadline(second); ok {
		t.Error("WorkDeadline after Stop: ok, want false")
	}
}
