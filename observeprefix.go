package election

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// prefixSub is a subscriber to every election key under a prefix: it keeps
// each entry the watcher delivers for those keys, with its key.
type prefixSub struct {
	prefix  string
	changed chan struct{}
	entries []keyEntry // kept entries not yet drained
}

// keyEntry is an entry of a key (nil: the key has none).
type keyEntry struct {
	key   string
	entry jetstream.KeyValueEntry
}

// covers reports whether key is an election key under the prefix.
func (s *prefixSub) covers(key string) bool {
	return strings.HasPrefix(key, s.prefix) && !strings.HasPrefix(key, reservedPrefix)
}

// subscribePrefix registers interest in every election key under prefix;
// if the hub is ready, the latest entry of each comes first.
func (h *hub) subscribePrefix(prefix string) *prefixSub {
	s := &prefixSub{prefix: prefix, changed: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prefixes[s] = struct{}{}
	if h.ready {
		for key, v := range h.views {
			if s.covers(key) {
				s.entries = append(s.entries, keyEntry{key, v.latest})
			}
		}
		s.changed <- struct{}{}
	}
	return s
}

func (h *hub) unsubscribePrefix(s *prefixSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.prefixes, s)
}

// drainPrefix returns whether the hub is ready and the entries kept for s.
func (h *hub) drainPrefix(s *prefixSub) (bool, []keyEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	entries := s.entries
	s.entries = nil
	return h.ready, entries
}

// ObservePrefix returns a channel that receives, for every election key
// that starts with prefix ("": every key of the bucket), who holds it each
// time that changes, as Observe does for one key: first the holder of each
// key that has one, once the watcher has read the bucket, then each change
// (a new holder, or nobody). A holder that aged out without an expiry
// marker shows as nobody within a quarter of a TTL after its TTL. Changes
// queue until received. The channel is closed when ctx is done or the
// bucket is closed. It reads nothing more from the server than the
// bucket's watcher does: it polls nothing.
func (b *Bucket) ObservePrefix(ctx context.Context, prefix string) (<-chan Leader, error) {
	out := make(chan Leader)
	sub := b.hub.subscribePrefix(prefix)
	go func() {
		defer close(out)
		defer b.hub.unsubscribePrefix(sub)
		o := prefixObserver{ttl: b.info.ttl, current: map[string]*observer{}}
		o.run(ctx, b.done, sub, b.hub, out)
	}()
	return out, nil
}

// prefixObserver turns the entries of many keys into changes of holder,
// with one observer's state per key.
type prefixObserver struct {
	ttl     time.Duration
	current map[string]*observer
	started bool
	pending []Leader
}

func (p *prefixObserver) run(ctx context.Context, closed <-chan struct{}, sub *prefixSub, h *hub, out chan<- Leader) {
	expiry := time.NewTicker(p.ttl / 4)
	defer expiry.Stop()
	for {
		var send chan<- Leader
		var next Leader
		if len(p.pending) > 0 {
			send, next = out, p.pending[0]
		}
		select {
		case <-ctx.Done():
			return
		case <-closed:
			return
		case send <- next:
			p.pending = p.pending[1:]
		case <-sub.changed:
			ready, entries := h.drainPrefix(sub)
			for _, ke := range entries {
				p.see(ke)
			}
			if ready && !p.started {
				p.started = true
				keys := make([]string, 0, len(p.current))
				for key, o := range p.current {
					o.started = true
					if o.current.Name != "" {
						keys = append(keys, key)
					}
				}
				slices.Sort(keys)
				for _, key := range keys {
					p.pending = append(p.pending, p.current[key].current)
				}
			}
		case now := <-expiry.C:
			for _, o := range p.current {
				if o.current.Name != "" && !now.Before(o.renewed.Add(p.ttl)) {
					o.change(Leader{Key: o.key}) // aged out without a marker
					p.collect(o)
				}
			}
		}
	}
}

// see applies one key's entry.
func (p *prefixObserver) see(ke keyEntry) {
	o := p.current[ke.key]
	if o == nil {
		o = &observer{key: ke.key, ttl: p.ttl, current: Leader{Key: ke.key}, started: p.started}
		p.current[ke.key] = o
	}
	o.see(ke.entry)
	p.collect(o)
}

// collect moves the key observer's changes to the queue.
func (p *prefixObserver) collect(o *observer) {
	p.pending = append(p.pending, o.pending...)
	o.pending = nil
}
