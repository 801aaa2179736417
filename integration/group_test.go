package integration

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
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
	t      *testing.T
	key    string
	events chan event
	log    *slog.Logger

	mu        sync.Mutex
	elections map[string]*election.Election // guarded by mu: add may run while sample reads
	leading   map[string]context.Context    // leadership contexts, by the callbacks: between OnWon and OnLost
	pending   []event                       // events await passed over, oldest first

	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
}

// startGroup starts one candidate per bucket handle (each should come from
// its own connection), named prefix-0, prefix-1, …
func startGroup(t *testing.T, prefix, key string, kvs []jetstream.KeyValue, opts ...election.Option) *group {
	t.Helper()
	g := newGroup(t, key)
	for i, kv := range kvs {
		g.add(fmt.Sprintf("%s-%d", prefix, i), kv, opts...)
	}
	return g
}

// newGroup makes a group without candidates, for add.
func newGroup(t *testing.T, key string) *group {
	g := &group{
		t:         t,
		key:       key,
		elections: map[string]*election.Election{},
		events:    make(chan event, 1024),
		leading:   map[string]context.Context{},
		log:       testenv.Logger(t),
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.running.Go(func() { g.sample(g.ctx) })
	t.Cleanup(g.stop)
	return g
}

// add starts a candidate named name on kv, with opts after the group's
// own; it replaces a stopped candidate of that name (a restart).
func (g *group) add(name string, kv jetstream.KeyValue, opts ...election.Option) *election.Election {
	g.t.Helper()
	all := append([]election.Option{
		election.WithoutSplay(),
		election.WithLogger(g.log.With("candidate", name)),
		election.OnWon(func(leading context.Context) {
			token, _ := election.TokenFromContext(leading)
			g.won(name, token, leading)
		}),
		election.OnLost(func(cause error) { g.lost(name, cause) }),
	}, opts...)
	e, err := election.NewElection(context.Background(), name, g.key, kv, all...)
	if err != nil {
		g.t.Fatal(err)
	}
	g.mu.Lock()
	g.elections[name] = e
	g.mu.Unlock()
	g.running.Go(func() {
		if err := e.Start(g.ctx); err != nil {
			g.t.Errorf("Start: %v", err)
		}
	})
	return e
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
		if leaders := g.leaders(); len(leaders) > 1 {
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

// leaders returns the candidates that lead now: each with the same fencing
// token (Token, 0 unless it leads) in two readings made in turn.
func (g *group) leaders() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := slices.Sorted(maps.Keys(g.elections))
	tokens := func() []uint64 {
		read := make([]uint64, len(names))
		for i, name := range names {
			read[i] = g.elections[name].Token() // 0 unless it leads
		}
		return read
	}
	// Two passes in one order: a candidate with the same token in both led
	// throughout, from its first reading to its second (a tenure's
	// leadership is one interval), and two such intervals of reads made in
	// turn overlap. One pass alone would see a leader that stood down and
	// its successor, read a moment apart, as two at once.
	first, second := tokens(), tokens()
	var leading []string
	for i, name := range names {
		if first[i] != 0 && first[i] == second[i] {
			leading = append(leading, name)
		}
	}
	return leading
}
