package integration

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
)

// rateClock runs at rate times real time from origin.
type rateClock struct {
	origin time.Time
	rate   float64
}

func (c rateClock) Now() time.Time {
	return c.origin.Add(time.Duration(float64(time.Since(c.origin)) * c.rate))
}
func (c rateClock) Real(d time.Duration) time.Duration { return time.Duration(float64(d) / c.rate) }

// TestOnceDoneForMarkBoundaryUnderSkewedClocks: a run marks the log
// done for 1 s (less than the TTL: the key is released). Hosts whose clocks
// run 5% slow and 5% fast then fire Once (RecordRuns, wait 0) every 20 ms.
// None may run the work before the mark ends by the server's clock
// (Stored + DoneFor); one must run it soon after the mark's end plus the
// server offset (MarkUntil): the pre-claim read must not skip a mark that
// has ended.
func TestOnceDoneForMarkBoundaryUnderSkewedClocks(t *testing.T) {
	t.Parallel()
	kvs, h, _ := runLogServer(t, "SKEW_MARK", 3)
	const d = time.Second
	outcome, err := onceElection(t, kvs[0], "a").Once(context.Background(), 0, func(context.Context) error { return nil },
		election.RecordRuns(h), election.DoneFor(d))
	if outcome != election.OnceRan || err != nil {
		t.Fatalf("a's Once = %v, %v", outcome, err)
	}
	runs := runOutcomes(t, h)
	if len(runs) != 1 {
		t.Fatalf("run log: %+v", runs)
	}
	stored := runs[0].Run().Stored
	markEnd := stored.Add(d)
	until := runs[0].Run().MarkUntil()
	t.Logf("stored %v, mark ends %v, MarkUntil %v", stored.Format("15:04:05.000"), markEnd.Format("15:04:05.000"), until.Format("15:04:05.000"))

	var ranAt atomic.Int64
	var runs2 atomic.Int32
	hosts := []struct {
		name string
		kv   int
		rate float64
	}{{"slow", 1, 0.95}, {"fast", 2, 1.05}}
	done := make(chan struct{})
	for _, host := range hosts {
		go func() {
			defer func() { done <- struct{}{} }()
			for time.Now().Before(until.Add(2 * time.Second)) {
				e, err := election.NewElection(context.Background(), host.name, "job", kvs[host.kv], election.WithoutSplay(),
					election.WithClock(rateClock{origin: time.Now(), rate: host.rate}),
					election.WithLogger(testenv.Logger(t).With("candidate", host.name)))
				if err != nil {
					t.Error(err)
					return
				}
				o, err := e.Once(context.Background(), 0, func(context.Context) error {
					now := time.Now()
					runs2.Add(1)
					ranAt.CompareAndSwap(0, now.UnixNano())
					if now.Before(markEnd) {
						t.Errorf("%s ran the work at %v, before the mark's end %v", host.name, now.Format("15:04:05.000"), markEnd.Format("15:04:05.000"))
					}
					return nil
				}, election.RecordRuns(h), election.DoneFor(d))
				if o == election.OnceRan {
					t.Logf("%s ran (%v)", host.name, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	<-done
	<-done
	if ranAt.Load() == 0 {
		t.Fatalf("nobody ran the work within 2 s of MarkUntil %v", until.Format("15:04:05.000"))
	}
	at := time.Unix(0, ranAt.Load())
	t.Logf("first run after the mark: %v (%v after the mark's end, %v after MarkUntil); %d runs in all", at.Format("15:04:05.000"), at.Sub(markEnd), at.Sub(until), runs2.Load())
	all := runOutcomes(t, h)
	for i := 1; i < len(all); i++ {
		prev, cur := all[i-1].Run(), all[i].Run()
		if began := cur.Stored.Add(-cur.Duration); began.Before(prev.Stored.Add(d)) {
			t.Errorf("run %d (%s) began %v, within run %d's (%s) mark that ends %v", i, cur.Name, began.Format("15:04:05.000"), i-1, prev.Name, prev.Stored.Add(d).Format("15:04:05.000"))
		}
	}
	t.Logf("%d runs in the log", len(all))
	if late := at.Sub(until); late > 500*time.Millisecond {
		t.Errorf("the work ran again %v after MarkUntil: a mark that ended kept it from running", late)
	}
}
