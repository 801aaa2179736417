package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestDrainingMarkUnderOppositeClockSkews: the draining mark
// with the clocks at the assumption's extremes: the leader a runs 5% slow
// (its work deadline, and the mark's "for", are later in real time than
// they read), the candidate b 5% fast (its wait over the mark is shorter in
// real time). a's key is deleted while its work does not stop. b must lead
// only after a's work deadline in real time (when a supervisor has killed
// a's work), never before.
func TestDrainingMarkUnderOppositeClockSkews(t *testing.T) {
	t.Parallel()
	const bucket = "DRAIN_SKEW"
	ttl := 2 * time.Second
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl})
	kvs := handles(t, s.ClientURL(), bucket, 2)
	stuck := make(chan struct{})
	type win struct {
		name, after string
		at          time.Time
	}
	wins := make(chan win, 4)
	var mu sync.Mutex
	var aDeadline time.Time // a's last WorkDeadline, as a real moment
	rates := map[string]float64{"a": 0.95, "b": 1.05}
	var es []*election.Election
	for i, name := range []string{"a", "b"} {
		clk := rateClock{origin: time.Now(), rate: rates[name]}
		e, err := election.NewElection(context.Background(), name, "k", kvs[i], election.WithoutSplay(), election.WithClock(clk),
			election.WithLogger(testenv.Logger(t).With("candidate", name)),
			election.WithEventHook(func(ev election.Event) {
				if ev.Kind == election.EventWon {
					wins <- win{name: name, after: ev.After, at: time.Now()}
				}
			}),
			election.OnWon(func(leading context.Context) {
				for leading.Err() == nil {
					if d, ok := election.WorkDeadline(leading); ok && name == "a" {
						real := time.Now().Add(clk.Real(d.Sub(clk.Now())))
						mu.Lock()
						aDeadline = real
						mu.Unlock()
					}
					select {
					case <-leading.Done():
					case <-time.After(5 * time.Millisecond):
					}
				}
				if name == "a" {
					<-stuck // a's work does not stop
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	done := make(chan struct{}, 2)
	go func() { es[0].Start(context.Background()); done <- struct{}{} }() //nolint:errcheck
	first := <-wins
	if first.name != "a" {
		t.Fatalf("%s led first", first.name)
	}
	go func() { es[1].Start(context.Background()); done <- struct{}{} }() //nolint:errcheck
	t.Cleanup(func() {
		close(stuck)
		for _, e := range es {
			e.Stop()
		}
	})
	time.Sleep(ttl) // b is listed, a renewed a few times
	if err := admin.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	var next win
	select {
	case next = <-wins:
	case <-time.After(10 * time.Second):
		t.Fatal("b did not lead")
	}
	mu.Lock()
	deadline := aDeadline
	mu.Unlock()
	t.Logf("b led over %q %v after the delete; a's work deadline (real) was %v after the delete", next.after, next.at.Sub(deleted), deadline.Sub(deleted))
	if next.name != "b" {
		t.Fatalf("%s led next", next.name)
	}
	if late := next.at.Sub(deadline); late < 0 {
		t.Errorf("b led %v before a's work deadline (in real time), a's work still running", -late)
	}
}
