package election

import (
	"container/heap"
	"context"
	"slices"
	"time"
)

// ObservePrefix returns a channel that receives, for every election key
// that starts with prefix ("": every key of the bucket), who holds it each
// time that changes, as Observe does for one key: first the holder of each
// key that has one, once the watcher has read the bucket, then each change
// (a new holder, or nobody). A holder that aged out without an expiry
// marker shows as nobody a TTL after its last write arrived. Changes
// queue until received. The channel is closed when ctx is done or the
// bucket is closed. It reads nothing more from the server than the
// bucket's watcher does: it polls nothing.
func (b *Bucket) ObservePrefix(ctx context.Context, prefix string) (<-chan Leader, error) {
	out := make(chan Leader)
	sub := b.watcher.subscribePrefix(prefix)
	go func() {
		defer close(out)
		defer b.watcher.unsubscribe(sub)
		o := prefixObserver{ttl: b.info.ttl, current: map[string]*observer{}, expiry: time.NewTimer(time.Hour)}
		defer o.expiry.Stop()
		o.run(ctx, b.done, sub, b.watcher, out)
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
	// deadlines holds, earliest first, a moment a TTL after each write of a
	// holder arrived; the timer fires at the earliest. A later write leaves
	// the earlier moment in, to be skipped when it comes.
	deadlines deadlineHeap
	expiry    *time.Timer
	armed     time.Time // when expiry fires; zero: stopped
}

func (p *prefixObserver) run(ctx context.Context, closed <-chan struct{}, sub *subscription, w *watcher, out chan<- Leader) {
	p.expiry.Stop()
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
			ready, entries := w.takeEntries(sub)
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
		case <-p.expiry.C:
			p.armed = time.Time{}
			p.ageOut(time.Now())
		}
		p.arm()
	}
}

// ageOut reports as nobody every holder whose last write arrived a TTL
// before now: it aged out without an expiry marker.
func (p *prefixObserver) ageOut(now time.Time) {
	for len(p.deadlines) > 0 && !now.Before(p.deadlines[0].at) {
		d := heap.Pop(&p.deadlines).(deadline)
		o := p.current[d.key]
		if o != nil && o.current.Name != "" && !now.Before(o.renewed.Add(p.ttl)) {
			o.change(Leader{Key: o.key})
			p.collect(o)
		}
	}
}

// arm sets the timer to the earliest deadline.
func (p *prefixObserver) arm() {
	if len(p.deadlines) == 0 || p.deadlines[0].at.Equal(p.armed) {
		return
	}
	p.expiry.Stop()
	p.armed = p.deadlines[0].at
	p.expiry.Reset(time.Until(p.armed))
}

// see applies one key's entry.
func (p *prefixObserver) see(ke keyEntry) {
	o := p.current[ke.key]
	if o == nil {
		o = &observer{key: ke.key, ttl: p.ttl, current: Leader{Key: ke.key}, started: p.started}
		p.current[ke.key] = o
	}
	o.see(ke)
	p.collect(o)
	if o.current.Name != "" {
		heap.Push(&p.deadlines, deadline{at: o.renewed.Add(p.ttl), key: ke.key})
	}
}

// deadline is a moment at which key's holder ages out unless it wrote since.
type deadline struct {
	at  time.Time
	key string
}

// deadlineHeap is a min-heap of deadlines (container/heap).
type deadlineHeap []deadline

func (d deadlineHeap) Len() int           { return len(d) }
func (d deadlineHeap) Less(i, j int) bool { return d[i].at.Before(d[j].at) }
func (d deadlineHeap) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlineHeap) Push(x any)        { *d = append(*d, x.(deadline)) }
func (d *deadlineHeap) Pop() any {
	old := *d
	last := old[len(old)-1]
	*d = old[:len(old)-1]
	return last
}

// collect moves the key observer's changes to the queue.
func (p *prefixObserver) collect(o *observer) {
	p.pending = append(p.pending, o.pending...)
	o.pending = nil
}
