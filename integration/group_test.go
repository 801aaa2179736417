package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// awaitTimeout guards against a hang; it is not a speed requirement.
const awaitTimeout = 60 * time.Second

// event is a leadership change seen through a candidate's callbacks.
type event struct {
	name  string
	won   bool
	token uint64 // on won
	cause error  // on lost
	at    time.Time
}

// group runs candidates for one key and checks, for its whole life, that no
// two of them lead at once: through their callbacks and by sampling IsLeader.
type group struct {
	t         *testing.T
	elections map[string]*election.Election
	events    chan event

	mu      sync.Mutex
	leading map[string]context.Context // leadership contexts, by the callbacks: between OnWon and OnLost
	pending []event                    // events await passed over, oldest first

	cancel  context.CancelFunc
	running sync.WaitGroup
}

// startGroup starts one candidate per bucket handle (each should come from
// its own connection), named prefix-0, prefix-1, …
func startGroup(t *testing.T, prefix, key string, kvs []jetstream.KeyValue, opts ...election.Option) *group {
	t.Helper()
	g := &group{
		t:         t,
		elections: map[string]*election.Election{},
		events:    make(chan event, 1024),
		leading:   map[string]context.Context{},
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	log := testenv.Logger(t)
	for i, kv := range kvs {
		name := fmt.Sprintf("%s-%d", prefix, i)
		all := append([]election.Option{
			election.WithoutSplay(),
			election.WithLogger(log.With("candidate", name)),
			election.OnWon(func(leading context.Context) {
				token, _ := election.TokenFromContext(leading)
				g.won(name, token, leading)
			}),
			election.OnLost(func(cause error) { g.lost(name, cause) }),
		}, opts...)
		e, err := election.NewElection(name, key, kv, all...)
		if err != nil {
			t.Fatal(err)
		}
		g.elections[name] = e
	}
	for _, e := range g.elections {
		g.running.Go(func() {
			if err := e.Start(ctx); err != nil {
				t.Errorf("Start: %v", err)
			}
		})
	}
	g.running.Go(func() { g.sample(ctx) })
	t.Cleanup(g.stop)
	return g
}

// won records an OnWon. Another candidate's OnLost may still be queued (it
// runs after that candidate stood down), but its leadership context must
// already be cancelled.
func (g *group) won(name string, token uint64, leading context.Context) {
	g.mu.Lock()
	for other, ctx := range g.leading {
		if ctx.Err() == nil {
			g.t.Errorf("%s announced leadership (token %d) while %s still led", name, token, other)
		}
	}
	g.leading[name] = leading
	g.mu.Unlock()
	g.events <- event{name: name, won: true, token: token, at: time.Now()}
}

func (g *group) lost(name string, cause error) {
	g.mu.Lock()
	delete(g.leading, name)
	g.mu.Unlock()
	g.events <- event{name: name, cause: cause, at: time.Now()}
}

// sample polls IsLeader on every candidate until ctx is done.
func (g *group) sample(ctx context.Context) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var leaders []string
		for name, e := range g.elections {
			if e.IsLeader() {
				leaders = append(leaders, name)
			}
		}
		if len(leaders) > 1 {
			g.t.Errorf("IsLeader true on %v at once", leaders)
		}
	}
}

// stop ends every candidate and waits for them.
func (g *group) stop() {
	g.cancel()
	g.running.Wait()
}

// await returns the oldest event not yet returned that matches. Events of
// different candidates may arrive in either order (each runs its callbacks
// on its own goroutine), so those passed over are kept for later calls.
func (g *group) await(what string, match func(event) bool) event {
	g.t.Helper()
	for i, ev := range g.pending {
		if match(ev) {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			return ev
		}
	}
	timeout := time.After(awaitTimeout)
	for {
		select {
		case ev := <-g.events:
			if match(ev) {
				return ev
			}
			g.pending = append(g.pending, ev)
		case <-timeout:
			g.t.Fatalf("no %s within %v", what, awaitTimeout)
		}
	}
}

func (g *group) awaitWin() event {
	g.t.Helper()
	return g.await("new leader", func(ev event) bool { return ev.won })
}

func (g *group) awaitLoss(name string) event {
	g.t.Helper()
	return g.await("stand-down of "+name, func(ev event) bool { return !ev.won && ev.name == name })
}

// leaders returns the candidates whose IsLeader is true now.
func (g *group) leaders() []string {
	var names []string
	for name, e := range g.elections {
		if e.IsLeader() {
			names = append(names, name)
		}
	}
	return names
}
