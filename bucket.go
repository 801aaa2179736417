package election

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is an election bucket as one process uses it: a single watcher on
// the server serves every election made from it, whatever their keys and
// names. A process with many elections (several roles per node, or
// thousands of keys) should make them from one Bucket: each election's own
// watcher is one more consumer on the server. Make one with OpenBucket and
// end it with Close.
type Bucket struct {
	kv       jetstream.KeyValue
	info     bucketInfo
	defaults []Option
	watcher  *watcher
	cancel   context.CancelFunc
	done     chan struct{} // closed when the watcher has stopped

	mu        sync.Mutex
	elections map[*Election]struct{}
	closed    bool
}

// OpenBucket reads the settings of the bucket kv (ctx bounds that read),
// checks that its keys expire, and starts watching it. The options are
// defaults for every election made from the bucket; WithLogger also sets the
// watcher's logger.
func OpenBucket(ctx context.Context, kv jetstream.KeyValue, defaults ...Option) (*Bucket, error) {
	if kv == nil {
		return nil, fmt.Errorf("%w: the bucket is nil; pass a jetstream.KeyValue bound to the election bucket", ErrInvalidArgument)
	}
	info, err := readBucket(ctx, kv)
	if err != nil {
		return nil, err
	}
	o := resolveOptions(defaults, info.ttl)
	watchCtx, cancel := context.WithCancel(context.Background())
	b := &Bucket{
		kv:        kv,
		info:      info,
		defaults:  defaults,
		watcher:   newWatcher(kv, nil, info.ttl, o.clock, o.logger.With("bucket", kv.Bucket())),
		cancel:    cancel,
		done:      make(chan struct{}),
		elections: make(map[*Election]struct{}),
	}
	go func() {
		defer close(b.done)
		b.watcher.run(watchCtx)
	}()
	return b, nil
}

// NewElection prepares an election for key on behalf of the candidate name,
// as the package's NewElection does, with the bucket's default options
// followed by opts. It reads nothing from the server.
func (b *Bucket) NewElection(name, key string, opts ...Option) (*Election, error) {
	if err := CheckCandidate(name, key); err != nil {
		return nil, err
	}
	var own options
	for _, opt := range opts {
		opt(&own)
	}
	if own.clock != nil {
		return nil, fmt.Errorf("%w: WithClock on an election of a Bucket: give it to OpenBucket, whose watcher every election of the bucket shares", ErrInvalidArgument)
	}
	e, err := newElection(name, key, b.kv, b.info, b.watcher, append(append([]Option(nil), b.defaults...), opts...))
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("%w: bucket %q was closed", ErrStopped, b.kv.Bucket())
	}
	b.elections[e] = struct{}{}
	e.bucket = b
	return e, nil
}

// Close stops every election made from the bucket (see Election.Stop), then
// its watcher, whose consumer it deletes from the server before it returns:
// close the connection after Close, not before. It must not be called from an
// election's callback. It is safe to call more than once.
func (b *Bucket) Close() {
	b.mu.Lock()
	b.closed = true
	elections := b.elections
	b.elections = map[*Election]struct{}{}
	b.mu.Unlock()
	for e := range elections {
		e.Stop()
	}
	b.cancel()
	<-b.done
}

// TTL returns the bucket's TTL: how long a key lives after its last write.
func (b *Bucket) TTL() time.Duration { return b.info.ttl }

// forget drops a stopped election.
func (b *Bucket) forget(e *Election) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.elections, e)
}
