package integration

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
)

// TestALowerPriorityStartedFirstLeadsUntilTheHigherIsListed: two
// replicas of a deploy, priority 1 (the default) and 2, start together as
// library.md defines it (within the start window, the campaign interval):
// the higher one a third of the interval after the lower. The lower finds
// no other record and leads at once; the higher, at the end of its
// listing window (a tenth of the TTL), finds it leading and asks for the
// key. So the lower's OnWon runs for the time between their starts plus a
// tenth of the TTL (plus round trips), as operations.md says, and the
// higher leads next.
func TestALowerPriorityStartedFirstLeadsUntilTheHigherIsListed(t *testing.T) {
	t.Parallel()
	s, _ := serverWithBucket(t, "PRIO_TOGETHER")
	kvs := handles(t, s.ClientURL(), "PRIO_TOGETHER", 2)
	type span struct {
		name       string
		start, end time.Time
	}
	spans := make(chan span, 8)
	var es []*election.Election
	for i := range 2 {
		name := []string{"p1", "p2"}[i]
		e, err := election.NewElection(context.Background(), name, "k", kvs[i], election.WithPriority(i+1),
			election.WithLogger(testenv.Logger(t).With("candidate", name)),
			election.OnWon(func(ctx context.Context) {
				sp := span{name: name, start: time.Now()}
				<-ctx.Done()
				sp.end = time.Now()
				spans <- sp
			}))
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	done := make(chan struct{}, 2)
	go func() { es[0].Start(context.Background()); done <- struct{}{} }() //nolint:errcheck
	interval := election.TimingFor(ttl, 0).Interval
	time.Sleep(interval / 3)                                              // within the start window
	go func() { es[1].Start(context.Background()); done <- struct{}{} }() //nolint:errcheck
	t.Cleanup(func() {
		for _, e := range es {
			e.Stop()
		}
	})
	select {
	case sp := <-spans:
		led := sp.end.Sub(sp.start)
		t.Logf("%s led %v (started %v apart, interval %v)", sp.name, led.Round(time.Millisecond), interval/3, interval)
		if sp.name != "p1" {
			t.Fatalf("%s lost the key first", sp.name)
		}
		if bound := interval/3 + ttl/10 + 250*time.Millisecond; led > bound {
			t.Errorf("priority 1's OnWon ran %v before the key went to priority 2, want at most the %v between their starts plus a tenth of the TTL (%v), +250 ms", led.Round(time.Millisecond), interval/3, ttl/10)
		}
	case <-time.After(3 * ttl):
		t.Fatal("the lower priority kept the key for 3 TTLs, or nobody led")
	}
	testenv.Eventually(t, "p2 to lead", 3*ttl, func() bool { return es[1].IsLeader() })
}
