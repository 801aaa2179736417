package integration

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// adversarialKV is a real bucket whose answers lie the ways a network and a
// busy server can, while the store itself stays linearizable: a write
// applied but answered with a timeout, a write dropped and answered with a
// timeout, an acknowledgement that arrives late, and watch entries
// delivered late (in order); and, while cut, every write dropped behind a
// timeout, as when the client is cut off from the servers.
type adversarialKV struct {
	jetstream.KeyValue
	mu  sync.Mutex
	rng *rand.Rand
	on  bool
	cut bool

	// script, if set, picks the fault of every Update in place of the
	// random draw, for a test that needs one at a given moment: 0 none,
	// 1 applied but answered with a timeout (the revision written is then
	// sent to lost, if set), 2 dropped with a timeout. It may block, which
	// holds the write back.
	script func(key string, value []byte, last uint64) int
	lost   chan uint64
	// delivered, if set, is told of every entry the watchers deliver.
	delivered func(jetstream.KeyValueEntry)
}

// setCut starts or ends a cut.
func (a *adversarialKV) setCut(cut bool) {
	a.mu.Lock()
	a.cut = cut
	a.mu.Unlock()
}

// fault picks what happens to one write: 0 none, 1 applied but a timeout,
// 2 dropped with a timeout, 3 a late acknowledgement; and the lateness.
func (a *adversarialKV) fault() (int, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.cut:
		return 2, 0
	case !a.on || a.rng.IntN(4) != 0:
		return 0, 0
	}
	return 1 + a.rng.IntN(3), time.Duration(a.rng.IntN(400)) * time.Millisecond
}

func (a *adversarialKV) stop() {
	a.mu.Lock()
	a.on, a.cut = false, false
	a.mu.Unlock()
}

// write runs do, a write, under a fault.
func (a *adversarialKV) write(ctx context.Context, do func(context.Context) (uint64, error)) (uint64, error) {
	kind, late := a.fault()
	switch kind {
	case 1:
		do(ctx)
		return 0, context.DeadlineExceeded
	case 2:
		return 0, context.DeadlineExceeded
	case 3:
		rev, err := do(ctx)
		time.Sleep(late)
		return rev, err
	}
	return do(ctx)
}

func (a *adversarialKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return a.write(ctx, func(ctx context.Context) (uint64, error) { return a.KeyValue.Create(ctx, key, value, opts...) })
}

func (a *adversarialKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	do := func(ctx context.Context) (uint64, error) { return a.KeyValue.Update(ctx, key, value, last) }
	if a.script == nil {
		return a.write(ctx, do)
	}
	switch a.script(key, value, last) {
	case 1:
		rev, err := do(ctx)
		if err == nil && a.lost != nil {
			a.lost <- rev
		}
		return 0, context.DeadlineExceeded
	case 2:
		return 0, context.DeadlineExceeded
	}
	return do(ctx)
}

func (a *adversarialKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := a.write(ctx, func(ctx context.Context) (uint64, error) { return 0, a.KeyValue.Delete(ctx, key, opts...) })
	return err
}

func (a *adversarialKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := a.KeyValue.WatchFiltered(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	delays := rand.New(rand.NewPCG(a.rng.Uint64(), 0))
	a.mu.Unlock()
	return newLateWatcher(w, func() time.Duration {
		if !a.faulty() {
			return 0
		}
		return time.Duration(delays.IntN(200)) * time.Millisecond
	}, a.delivered), nil
}

func (a *adversarialKV) faulty() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.on
}

// lateWatcher delivers a watcher's entries in order, each after a delay,
// and tells delivered (if not nil) of each once delivered.
type lateWatcher struct {
	jetstream.KeyWatcher
	updates  chan jetstream.KeyValueEntry
	stopped  chan struct{}
	stopOnce sync.Once
}

func newLateWatcher(w jetstream.KeyWatcher, delay func() time.Duration, delivered func(jetstream.KeyValueEntry)) *lateWatcher {
	lw := &lateWatcher{KeyWatcher: w, updates: make(chan jetstream.KeyValueEntry), stopped: make(chan struct{})}
	go func() {
		defer close(lw.updates)
		for e := range w.Updates() {
			select {
			case <-time.After(delay()):
			case <-lw.stopped:
				return
			}
			select {
			case lw.updates <- e:
			case <-lw.stopped:
				return
			}
			if delivered != nil && e != nil {
				delivered(e)
			}
		}
	}()
	return lw
}

func (w *lateWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

func (w *lateWatcher) Stop() error {
	w.stopOnce.Do(func() { close(w.stopped) })
	return w.KeyWatcher.Stop()
}

// TestAdversarialAnswersKeepOneLeader runs three candidates whose bucket
// answers lie (writes applied or dropped behind timeouts, late
// acknowledgements, late watch entries), while another client deletes the
// key now and then and leaders are cut off past their TTL, to force
// failovers: never two leaders (the group checks callbacks and IsLeader),
// and once the lies stop, a leader again.
func TestAdversarialAnswersKeepOneLeader(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ADVERSARY", TTL: 2 * time.Second})

	g := newGroup(t, "job")
	var liars []*adversarialKV
	for i := range 3 {
		_, jsN := testenv.Connect(t, s.ClientURL())
		kvN, err := jsN.KeyValue(context.Background(), "ADVERSARY")
		if err != nil {
			t.Fatal(err)
		}
		a := &adversarialKV{KeyValue: kvN, rng: rand.New(rand.NewPCG(rng.Uint64(), uint64(i))), on: true}
		liars = append(liars, a)
		g.add(string(rune('a'+i)), a)
	}
	g.awaitWin()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond) // the faults' pace
		if rng.IntN(2) == 0 {
			kv.Delete(context.Background(), "job")
			continue
		}
		// Cut a leader off for one to two TTLs: its key ages out.
		for i, name := range []string{"a", "b", "c"} {
			if slices.Contains(g.leaders(), name) {
				liars[i].setCut(true)
				time.Sleep(time.Duration(2000+rng.IntN(2000)) * time.Millisecond)
				liars[i].setCut(false)
			}
		}
	}
	for _, a := range liars {
		a.stop()
	}
	testenv.Eventually(t, "a leader once the answers are true again", awaitTimeout, func() bool { return len(g.leaders()) == 1 })
}
