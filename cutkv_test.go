package election

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
)

var errCut = errors.New("cut off from the servers")

// cutKV is a real bucket whose writes fail, and whose watchers deliver
// nothing, while cut, as when its client is cut off from the servers.
// reopen ends its watchers, so the watcher starts a new one whose initial state
// shows only the key's latest entry (as after a reconnect): what happened
// meanwhile is never delivered one by one.
type cutKV struct {
	jetstream.KeyValue
	cut      atomic.Bool
	failed   atomic.Int32 // writes refused while cut
	mu       sync.Mutex
	watchers []*cutWatcher
}

// cutWatcher delivers what its cutKV lets through.
type cutWatcher struct {
	jetstream.KeyWatcher
	updates chan jetstream.KeyValueEntry
	ended   chan struct{}
	once    sync.Once
}

func (w *cutWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

func (w *cutWatcher) end() { w.once.Do(func() { close(w.ended) }) }

func (w *cutWatcher) Stop() error { w.end(); return w.KeyWatcher.Stop() }

func (k *cutKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchFiltered(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
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
	k.watchers = append(k.watchers, cw)
	k.mu.Unlock()
	return cw, nil
}

// reopen ends every KV watcher: the watcher replaces it.
func (k *cutKV) reopen() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.watchers {
		w.end()
	}
	k.watchers = nil
}

func (k *cutKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if k.cut.Load() {
		k.failed.Add(1)
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
