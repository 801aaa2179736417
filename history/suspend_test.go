package history

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// sleepyClock is the machine's monotonic clock while it may be suspended:
// it stands still while frozen and, once resumed, reports the time it
// stood still as slept (election.SuspendReporter), as Linux's does.
type sleepyClock struct {
	mu       sync.Mutex
	offset   time.Duration // real time the clock did not count
	frozenAt time.Time     // zero: running
}

func (c *sleepyClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozenAt.IsZero() {
		return c.frozenAt.Add(-c.offset)
	}
	return time.Now().Add(-c.offset)
}

func (*sleepyClock) Real(d time.Duration) time.Duration { return d }

func (c *sleepyClock) Suspended() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// freeze suspends the machine: the clock stands still until resume.
func (c *sleepyClock) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozenAt = time.Now()
}

// resume ends the suspend: the clock runs on from where it stood.
func (c *sleepyClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += time.Since(c.frozenAt)
	c.frozenAt = time.Time{}
}

var errCut = errors.New("cut off from the servers")

// cutKV is a real bucket whose writes fail, and whose watchers deliver
// nothing, while cut, as a suspended machine's; reopen ends its watchers,
// so that the election's watcher starts anew from the key's latest entry,
// as after a reconnect.
type cutKV struct {
	jetstream.KeyValue
	cut      atomic.Bool
	mu       sync.Mutex
	watchers []chan struct{}
}

func (k *cutKV) watch(w jetstream.KeyWatcher) jetstream.KeyWatcher {
	cw := &cutWatcher{KeyWatcher: w, updates: make(chan jetstream.KeyValueEntry), ended: make(chan struct{})}
	go func() {
		defer close(cw.updates)
		for {
			select {
			case <-cw.ended:
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if k.cut.Load() {
					continue
				}
				select {
				case cw.updates <- e:
				case <-cw.ended:
					return
				}
			}
		}
	}()
	k.mu.Lock()
	k.watchers = append(k.watchers, cw.ended)
	k.mu.Unlock()
	return cw
}

// reopen ends every watcher.
func (k *cutKV) reopen() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, ended := range k.watchers {
		select {
		case <-ended:
		default:
			close(ended)
		}
	}
	k.watchers = nil
}

// cutWatcher delivers what its cutKV lets through.
type cutWatcher struct {
	jetstream.KeyWatcher
	updates chan jetstream.KeyValueEntry
	ended   chan struct{}
}

func (w *cutWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

func (k *cutKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchFiltered(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
	return k.watch(w), nil
}

func (k *cutKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchAll(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return k.watch(w), nil
}

func (k *cutKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if k.cut.Load() {
		return 0, errCut
	}
	return k.KeyValue.Update(ctx, key, value, last)
}

func (k *cutKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if k.cut.Load() {
		return 0, errCut
	}
	return k.KeyValue.Put(ctx, key, value)
}

func (k *cutKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if k.cut.Load() {
		return errCut
	}
	return k.KeyValue.Delete(ctx, key, opts...)
}

// awaitEvent returns the first event of ch that match accepts.
func awaitEvent(t *testing.T, ch <-chan election.Event, what string, match func(election.Event) bool) election.Event {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-ch:
			if match(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s", what)
		}
	}
}

// TestHistoryDatesASuspendedLeadersStandDownToItsDeadline: a leads; right
// after a renewal its machine suspends (its monotonic clock stands still,
// it is cut off from the servers) past its key's expiry, and b, on
// another machine with a history of its own, takes over. When a resumes
// it stands down for the suspend, and the history dates its stand-down to
// its validity deadline, flagged late: before b's win, not at the resume.
func TestHistoryDatesASuspendedLeadersStandDownToItsDeadline(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SUSPENDED", TTL: 2 * time.Second, History: 16})
	ha, err := Create(context.Background(), js, "SUSPENDED", 0)
	if err != nil {
		t.Fatal(err)
	}
	clk := &sleepyClock{}
	ha.now, ha.suspended = clk.Now, clk.Suspended
	_, js2 := testenv.Connect(t, s.ClientURL())
	kv2, err := js2.KeyValue(context.Background(), "SUSPENDED")
	if err != nil {
		t.Fatal(err)
	}
	hb, err := Open(context.Background(), js2, "SUSPENDED")
	if err != nil {
		t.Fatal(err)
	}

	aKV := &cutKV{KeyValue: kv}
	aEvents, bEvents := make(chan election.Event, 256), make(chan election.Event, 256)
	a, err := election.NewElection(context.Background(), "a", "k", aKV, election.WithoutSplay(), election.WithClock(clk),
		election.WithLogger(testenv.Logger(t).With("candidate", "a")),
		election.WithEventHook(func(ev election.Event) { ha.Record(ev); aEvents <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	b, err := election.NewElection(context.Background(), "b", "k", kv2, election.WithoutSplay(),
		election.WithLogger(testenv.Logger(t).With("candidate", "b")),
		election.WithEventHook(func(ev election.Event) { hb.Record(ev); bEvents <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []*election.Election{a, b} {
		done := make(chan struct{})
		go func() { defer close(done); e.Start(context.Background()) }() //nolint:errcheck // stopped below
		t.Cleanup(func() { e.Stop(); <-done })
		if e == a {
			awaitEvent(t, aEvents, "win of a's", func(ev election.Event) bool { return ev.Kind == election.EventWon })
		}
	}
	awaitEvent(t, aEvents, "renewal of a's", func(ev election.Event) bool { return ev.Kind == election.EventRenewed && ev.Err == nil })

	clk.freeze()
	aKV.cut.Store(true)
	won := awaitEvent(t, bEvents, "win of b's", func(ev election.Event) bool { return ev.Kind == election.EventWon })
	time.Sleep(2 * time.Second) // the suspend lasts on past b's win, as a laptop's lid stays shut
	aKV.cut.Store(false)
	aKV.reopen()
	clk.resume()
	lost := awaitEvent(t, aEvents, "stand-down of a's", func(ev election.Event) bool { return ev.Kind == election.EventLost })
	if !errors.Is(lost.Err, election.ErrSuspended) {
		t.Fatalf("a stood down for %v, want ErrSuspended", lost.Err)
	}

	var wonAt, downAt *Event
	events := testenv.Poll(t, "a's stand-down and b's win in the history", 30*time.Second, func() ([]Event, bool) {
		events, err := ha.Events(context.Background(), "k", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		wonAt, downAt = nil, nil
		for i, ev := range events {
			switch {
			case ev.Name == "b" && ev.Kind == Won && ev.Token == won.Token:
				wonAt = &events[i]
			case ev.Name == "a" && ev.Kind == StoodDown && ev.Token == lost.Token:
				downAt = &events[i]
			}
		}
		return events, wonAt != nil && downAt != nil
	})
	t.Logf("a stood down at %s (late %v, delay %v, stored %s); b won at %s",
		downAt.At.Format("15:04:05.000"), downAt.Late, downAt.Delay.Round(time.Millisecond),
		downAt.Recorded.Format("15:04:05.000"), wonAt.At.Format("15:04:05.000"))
	if !downAt.Late {
		t.Error("a's stand-down is not flagged late")
	}
	if downAt.At.After(wonAt.At) {
		t.Errorf("the history dates a's stand-down %v after b's win: two leaders at once", downAt.At.Sub(wonAt.At).Round(time.Millisecond))
	}
	var order []string
	for _, ev := range events {
		order = append(order, ev.Name+" "+ev.Kind)
	}
	if i, j := indexOf(order, "a stood_down"), indexOf(order, "b won"); i > j {
		t.Errorf("the history lists %q: a's stand-down after b's win", order)
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
