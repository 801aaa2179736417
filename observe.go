package election

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Leader is who holds an election key, as a watcher sees it. A holder that
// won the key over a delete or a purge announces leadership up to a TTL
// after its claim (see the package documentation); until then it holds the
// key but does not lead.
type Leader struct {
	Key  string
	Name string // the holder; "" when nobody holds the key
	// Revision is the holder's latest write: its claim or a renewal.
	Revision uint64
	// Written is when that write reached the server, by the server's clock.
	Written time.Time
	// Claimed says that Revision is the holder's claim, its fencing token:
	// the watcher delivered that write right after the key's previous one,
	// another's or none, missing nothing of the bucket in between. Only
	// Observe and ObservePrefix set it, on a change to a new holder. False
	// when that cannot be told: the holder held the key when the watcher
	// started or was replaced, or the watcher lagged (a paused process)
	// and the server had replaced the claim before sending it, or the
	// holder is the one last seen before its key was reported aged out.
	Claimed bool
}

// leaderOf reads who holds key from its view.
func leaderOf(key string, v *keyView) Leader {
	if !v.held() {
		return Leader{Key: key}
	}
	return Leader{Key: key, Name: string(v.latest.Value()), Revision: v.latest.Revision(), Written: v.latest.Created()}
}

// Leader returns who holds key now, once the bucket's watcher has read the
// bucket (ctx bounds that wait). A holder not heard from for a TTL holds
// nothing: its key has aged out.
func (b *Bucket) Leader(ctx context.Context, key string) (Leader, error) {
	if err := CheckKey(key); err != nil {
		return Leader{}, err
	}
	if err := b.awaitReady(ctx); err != nil {
		return Leader{Key: key}, err
	}
	v := b.watcher.view(key)
	return b.holderOf(key, &v), nil
}

// holderOf reads who holds key from its view, as leaderOf does, except
// that a holder not heard from for a TTL holds nothing: its key has aged out
// even if the bucket, keeping no expiry markers, did not say so.
func (b *Bucket) holderOf(key string, v *keyView) Leader {
	if v.held() && b.watcher.clock.Now().Sub(v.seenAt) >= b.info.ttl {
		return Leader{Key: key}
	}
	return leaderOf(key, v)
}

// Leaders returns the holder of every key of the bucket that has one, once
// the bucket's watcher has read the bucket (ctx bounds that wait).
func (b *Bucket) Leaders(ctx context.Context) ([]Leader, error) {
	if err := b.awaitReady(ctx); err != nil {
		return nil, err
	}
	var leaders []Leader
	for key, v := range b.watcher.snapshot() {
		if l := b.holderOf(key, &v); l.Name != "" && !strings.HasPrefix(key, reservedPrefix) {
			leaders = append(leaders, l)
		}
	}
	return leaders, nil
}

// awaitReady waits until the bucket's watcher has read the bucket.
func (b *Bucket) awaitReady(ctx context.Context) error {
	select {
	case <-b.watcher.readyCh:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("bucket %q: %w", b.kv.Bucket(), ctx.Err())
	case <-b.done:
		return fmt.Errorf("%w: bucket %q was closed", ErrStopped, b.kv.Bucket())
	}
}

// Observe returns a channel that receives who holds key each time that
// changes: a new holder, or nobody (a release, a delete, a purge, an expiry
// marker, or no renewal for a TTL on a bucket without expiry markers). The
// first value is the holder when the watcher has read the bucket. Renewals
// by the same holder are not changes. Every change the watcher delivers is
// kept until it is received, however slow the reader; when the watcher is
// replaced after a stall, the change to what the new watcher finds is
// delivered (changes in between left no trace in the bucket). The channel
// is closed when ctx is done or the bucket is closed.
//
// The server delivers only values it still holds: on a bucket that keeps
// one revision per key (the default), a value replaced before the server
// sent it to the watcher is never delivered. A release followed at once by
// the next claim, the usual handover, can therefore show as a change
// straight from the old holder to the new one, and a holder replaced within
// a moment of its claim can go unseen. A bucket with a longer history
// narrows that window.
func (b *Bucket) Observe(ctx context.Context, key string) (<-chan Leader, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	out := make(chan Leader)
	sub := b.watcher.subscribeLog(key)
	go func() {
		defer close(out)
		defer b.watcher.unsubscribe(sub)
		o := observer{key: key, ttl: b.info.ttl, current: Leader{Key: key}}
		o.run(ctx, b.done, sub, b.watcher, out)
	}()
	return out, nil
}

// observer turns the entries of one key into changes of holder.
type observer struct {
	key     string
	ttl     time.Duration
	current Leader
	started bool
	pending []Leader
	renewed time.Time // when the holder's latest write arrived, on the local clock
	// written is the holder of the latest entry delivered ("" for none, a
	// release or a removal), which an age-out reported without a marker
	// does not change: its next renewal is no claim.
	written string
}

func (o *observer) run(ctx context.Context, closed <-chan struct{}, sub *subscription, w *watcher, out chan<- Leader) {
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	defer expiry.Stop()
	for {
		var send chan<- Leader
		var next Leader
		if len(o.pending) > 0 {
			send, next = out, o.pending[0]
		}
		select {
		case <-ctx.Done():
			return
		case <-closed:
			return
		case send <- next:
			o.pending = o.pending[1:]
		case <-sub.changed:
			ready, entries := w.takeEntries(sub)
			for _, ke := range entries {
				o.see(ke)
			}
			if ready && !o.started {
				o.started = true
				o.pending = append(o.pending, o.current)
			}
			if o.current.Name != "" {
				expiry.Reset(time.Until(o.renewed.Add(o.ttl)))
			}
		case <-expiry.C:
			if o.current.Name != "" && !time.Now().Before(o.renewed.Add(o.ttl)) {
				o.change(Leader{Key: o.key}) // aged out without a marker
			}
		}
	}
}

// see applies one entry (nil: the key has none).
func (o *observer) see(ke keyEntry) {
	v := keyView{ready: true}
	v.advance(ke.entry, time.Now())
	l := leaderOf(o.key, &v)
	previous := o.written
	o.written = l.Name
	if l.Name != "" && l.Name == o.current.Name {
		o.current.Revision, o.current.Written, o.renewed = l.Revision, l.Written, time.Now() // a renewal
		return
	}
	if l.Name != "" {
		o.renewed = time.Now()
		l.Claimed = ke.follows && previous != l.Name
	}
	o.change(l)
}

func (o *observer) change(l Leader) {
	if l.Name == o.current.Name && l.Name == "" {
		return
	}
	o.current = l
	if o.started {
		o.pending = append(o.pending, l)
	}
}
