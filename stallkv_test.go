package election

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
)

// stallKV is a real bucket whose next Update of key, once armed, applies
// and then answers with a timeout (its answer lost), running the armed
// function first; while stalled, its watchers hold back what they would
// deliver (as a slow watcher would), delivering it once unstalled.
type stallKV struct {
	jetstream.KeyValue
	key     string
	armed   chan func()
	stalled atomic.Bool
	mu      sync.Mutex
	resume  chan struct{}
}

func newStallKV(kv jetstream.KeyValue, key string) *stallKV {
	return &stallKV{KeyValue: kv, key: key, armed: make(chan func(), 1), resume: make(chan struct{})}
}

func (k *stallKV) stall() {
	k.mu.Lock()
	k.resume = make(chan struct{})
	k.mu.Unlock()
	k.stalled.Store(true)
}

func (k *stallKV) unstall() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stalled.Swap(false) {
		close(k.resume)
	}
}

type stallWatcher struct {
	jetstream.KeyWatcher
	updates chan jetstream.KeyValueEntry
	ended   chan struct{}
	once    sync.Once
}

func (w *stallWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }
func (w *stallWatcher) Stop() error {
	w.once.Do(func() { close(w.ended) })
	return w.KeyWatcher.Stop()
}

func (k *stallKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchAll(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return k.wrap(w), nil
}

func (k *stallKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchFiltered(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
	return k.wrap(w), nil
}

func (k *stallKV) wrap(w jetstream.KeyWatcher) jetstream.KeyWatcher {
	sw := &stallWatcher{KeyWatcher: w, updates: make(chan jetstream.KeyValueEntry), ended: make(chan struct{})}
	go func() {
		defer close(sw.updates)
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-sw.ended:
				return
			case e, ok = <-w.Updates():
				if !ok {
					return
				}
			}
			if k.stalled.Load() {
				k.mu.Lock()
				resume := k.resume
				k.mu.Unlock()
				select {
				case <-resume:
				case <-sw.ended:
					return
				}
			}
			select {
			case sw.updates <- e:
			case <-sw.ended:
				return
			}
		}
	}()
	return sw
}

func (k *stallKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if key != k.key {
		return k.KeyValue.Update(ctx, key, value, last)
	}
	select {
	case lost := <-k.armed:
		k.stall()
		_, err := k.KeyValue.Update(ctx, key, value, last)
		if err != nil {
			panic(err)
		}
		lost()
		return 0, context.DeadlineExceeded
	default:
		return k.KeyValue.Update(ctx, key, value, last)
	}
}
