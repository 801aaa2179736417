package sim

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KV is a real bucket whose answers lie the ways a network and a busy
// server can, while the store itself stays linearizable. Each fault is a
// window, set by the simulation: while writes are lost, a write is applied
// but answered with a timeout; while answers are late, it is applied late
// or answered late (with a timeout if either comes after the caller's
// deadline; a late request is applied all the same); while watches are late, watched entries arrive late, in order;
// and while cut, every call fails with a timeout and no watched entry
// arrives, as when the client's link stalls both ways. A fault window hits
// each write with probability one half.
//
// TTL, if set, is the TTL Status reports in place of the bucket's own: a
// bucket whose real TTL is shorter by the clock assumption's server offset
// stands for a server whose wall clock is that far ahead of the one that
// stamped the write, which ages keys out that much early.
type KV struct {
	jetstream.KeyValue
	TTL time.Duration

	seed uint64        // draws
	link time.Duration // a write's latency to the server (see latency)
	// maxLate and maxWatch bound how late an answer and a watched entry
	// come: 0.3 and 0.15 of the TTL.
	maxLate, maxWatch time.Duration

	mu    sync.Mutex
	lost  time.Time         // writes lost until then
	late  time.Time         // answers late until then
	watch time.Time         // watched entries late until then
	cut   time.Time         // cut off until then
	own   map[string]uint64 // by key, the latest revision this client wrote
	trap  *trap             // aimed at the next renewal, if set
}

// trap is a fault aimed at one phase of a holder's renewal cycle: the next
// renewal (an Update over this client's own latest revision of key) sent at
// least minLeft before its call's deadline, before until. The renewal is
// applied; with lost its answer is lost (a timeout), otherwise it comes
// late by frac of the time left to the deadline; then the client is cut
// for cutFor (none if 0), and fired is called.
type trap struct {
	key     string
	minLeft time.Duration
	until   time.Time
	lost    bool
	frac    float64
	cutFor  time.Duration
	fired   func()
}

// setTrap aims t at the next renewal (replacing any trap set before).
func (k *KV) setTrap(t *trap) {
	k.mu.Lock()
	k.trap = t
	k.mu.Unlock()
}

// sprung returns the trap the renewal of key over last sets off, and
// disarms it; nil if none.
func (k *KV) sprung(ctx context.Context, key string, last uint64) *trap {
	k.mu.Lock()
	defer k.mu.Unlock()
	t := k.trap
	if t == nil || t.key != key || last == 0 || k.own[key] != last || time.Now().Before(k.cut) {
		return nil
	}
	if !time.Now().Before(t.until) {
		k.trap = nil
		return nil
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) < t.minLeft {
		return nil
	}
	k.trap = nil
	return t
}

// wrote notes rev as this client's latest revision of key.
func (k *KV) wrote(key string, rev uint64, err error) {
	if err != nil {
		return
	}
	k.mu.Lock()
	k.own[key] = rev
	k.mu.Unlock()
}

// spring plays trap t on a renewal.
func (k *KV) spring(ctx context.Context, t *trap, do func(context.Context) (uint64, error)) (uint64, error) {
	time.Sleep(k.latency(t.key))
	rev, err := do(ctx)
	defer func() {
		if t.cutFor > 0 {
			k.set(faultCut, time.Now().Add(t.cutFor))
		}
		if t.fired != nil {
			t.fired()
		}
	}()
	if t.lost {
		return 0, timeout(ctx)
	}
	d, _ := ctx.Deadline()
	time.Sleep(time.Duration(float64(time.Until(d)) * t.frac))
	return rev, err
}

// NewKV wraps kv; ttl (at least a second) is the TTL Status reports and
// sets how late answers come (up to 0.3 TTL) and watched entries (0.15
// TTL), seed seeds its draws, and link is the latency of its writes to the
// server.
func NewKV(kv jetstream.KeyValue, ttl time.Duration, seed uint64, link time.Duration) *KV {
	return &KV{KeyValue: kv, TTL: ttl, seed: seed, link: link, maxLate: ttl * 3 / 10, maxWatch: ttl * 3 / 20, own: map[string]uint64{}}
}

// Fault windows a KV can be given.
type kvFault int

const (
	faultLost kvFault = iota
	faultLate
	faultWatch
	faultCut
)

// set opens a window of fault f until the given moment.
func (k *KV) set(f kvFault, until time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	w := map[kvFault]*time.Time{faultLost: &k.lost, faultLate: &k.late, faultWatch: &k.watch, faultCut: &k.cut}[f]
	if until.After(*w) {
		*w = until
	}
}

// cutUntil is when the current cut ends (zero: not cut).
func (k *KV) cutUntil() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Now().Before(k.cut) {
		return k.cut
	}
	return time.Time{}
}

// draw picks what happens to one write of key, sent now: a fault (ok
// false: none), and for a late write how late, and whether on its way to
// the server (request) or back.
func (k *KV) draw(key string) (f kvFault, late time.Duration, request, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	h := k.hash(key, uint64(now.UnixNano()))
	switch {
	case now.Before(k.cut):
		return faultCut, 0, false, true
	case now.Before(k.lost) && h%2 == 0:
		return faultLost, 0, false, true
	case now.Before(k.late) && h%2 == 0:
		return faultLate, time.Duration(h>>2%uint64(k.maxLate/time.Millisecond)) * time.Millisecond, h>>1%2 == 0, true
	}
	return 0, 0, false, false
}

// hash draws a number for key and x from the KV's seed. Draws are made
// from what a call is, not from a sequence, so that a call made at the same
// instant of two runs of a seed draws the same whatever order the bubble's
// goroutines ran in.
func (k *KV) hash(key string, x uint64) uint64 {
	h := k.seed ^ 0x9e3779b97f4a7c15
	for i := range len(key) {
		h = (h ^ uint64(key[i])) * 0x100000001b3
	}
	return mix(h ^ mix(x))
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// watchDelay is how late entry e arrives.
func (k *KV) watchDelay(e jetstream.KeyValueEntry) time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !time.Now().Before(k.watch) || e == nil {
		return 0
	}
	return time.Duration(k.hash(e.Key(), e.Revision())%uint64(k.maxWatch/time.Millisecond)) * time.Millisecond
}

// latency is how long a write of key sent now takes to reach the server:
// the client's link latency, and up to 100 µs more, drawn for the key and
// the instant, so that writes sent at one instant (by clients reacting to
// one event they all watched, or by one client for several keys) reach the
// server one after the other, in an order the seed decides, rather than at
// one instant, in the order Go happens to run them.
func (k *KV) latency(key string) time.Duration {
	return k.link + time.Duration(k.hash(key, ^uint64(time.Now().UnixNano()))%100000)
}

// timeout waits as a call without an answer does, until ctx's deadline (at
// most 5 s, jetstream's default), and returns its error.
func timeout(ctx context.Context) error {
	wait := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return context.DeadlineExceeded
}

// write runs do, a write, under the faults open now. A late write is late
// on its way to the server half the time, and on its way back otherwise; a
// request later than its caller's deadline is applied anyway, after the
// caller had its timeout, as a request still in flight is.
func (k *KV) write(ctx context.Context, key string, do func(context.Context) (uint64, error)) (uint64, error) {
	f, late, request, ok := k.draw(key)
	time.Sleep(k.latency(key))
	if !ok {
		return do(ctx)
	}
	switch f {
	case faultCut:
		return 0, timeout(ctx)
	case faultLost:
		do(ctx)
		return 0, timeout(ctx)
	}
	if request {
		if d, ok := ctx.Deadline(); ok && time.Until(d) < late {
			go func() {
				time.Sleep(late)
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				do(ctx)
			}()
			return 0, timeout(ctx)
		}
		time.Sleep(late)
		return do(ctx)
	}
	rev, err := do(ctx)
	if d, ok := ctx.Deadline(); ok && time.Until(d) < late {
		return 0, timeout(ctx)
	}
	t := time.NewTimer(late)
	defer t.Stop()
	select {
	case <-t.C:
		return rev, err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (k *KV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := k.write(ctx, key, func(ctx context.Context) (uint64, error) { return k.KeyValue.Create(ctx, key, value, opts...) })
	k.wrote(key, rev, err)
	return rev, err
}

func (k *KV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	do := func(ctx context.Context) (uint64, error) { return k.KeyValue.Update(ctx, key, value, last) }
	var rev uint64
	var err error
	if t := k.sprung(ctx, key, last); t != nil {
		rev, err = k.spring(ctx, t, do)
	} else {
		rev, err = k.write(ctx, key, do)
	}
	k.wrote(key, rev, err)
	return rev, err
}

func (k *KV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return k.write(ctx, key, func(ctx context.Context) (uint64, error) { return k.KeyValue.Put(ctx, key, value) })
}

func (k *KV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := k.write(ctx, key, func(ctx context.Context) (uint64, error) { return 0, k.KeyValue.Delete(ctx, key, opts...) })
	return err
}

func (k *KV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := k.write(ctx, key, func(ctx context.Context) (uint64, error) { return 0, k.KeyValue.Purge(ctx, key, opts...) })
	return err
}

func (k *KV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if !k.cutUntil().IsZero() {
		return nil, timeout(ctx)
	}
	return k.KeyValue.Get(ctx, key)
}

// Status reports TTL in place of the bucket's, if set.
func (k *KV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	if !k.cutUntil().IsZero() {
		return nil, timeout(ctx)
	}
	st, err := k.KeyValue.Status(ctx)
	if err != nil || k.TTL == 0 {
		return st, err
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		bs.StreamInfo().Config.MaxAge = k.TTL
	}
	return st, nil
}

func (k *KV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchFiltered(ctx, keys, opts...)
	if err != nil {
		return nil, err
	}
	return k.delayed(w), nil
}

func (k *KV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchAll(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return k.delayed(w), nil
}

// lateWatcher delivers a watcher's entries in order, each after the delay
// its KV's windows give it, and none while the KV is cut.
type lateWatcher struct {
	jetstream.KeyWatcher
	updates  chan jetstream.KeyValueEntry
	stopped  chan struct{}
	stopOnce sync.Once
}

func (k *KV) delayed(w jetstream.KeyWatcher) *lateWatcher {
	lw := &lateWatcher{KeyWatcher: w, updates: make(chan jetstream.KeyValueEntry), stopped: make(chan struct{})}
	go func() {
		defer close(lw.updates)
		for e := range w.Updates() {
			for {
				wait := k.watchDelay(e)
				if until := k.cutUntil(); !until.IsZero() {
					wait = time.Until(until)
				}
				if wait <= 0 {
					break
				}
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-lw.stopped:
					t.Stop()
					return
				}
				if k.cutUntil().IsZero() {
					break
				}
			}
			select {
			case lw.updates <- e:
			case <-lw.stopped:
				return
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
