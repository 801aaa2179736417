package election

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// watcher is the bucket's watcher: one KV watcher on the server (a
// jetstream.KeyWatcher), shared by every election and observer of a bucket
// in this process. It keeps a keyView per key and wakes the subscribers of
// a key when its view changes.
//
// A KV watcher can stall for 10–20 s when its server dies (the ordered
// consumer's heartbeat check), and it never reports a key that aged out on a
// bucket without expiry markers. The watcher therefore replaces its KV watcher
// whenever the stream should have spoken and did not: it owes this process
// a write and delivers nothing new for echoTimeout, or a key is held and the whole
// bucket stays silent for quietLimit (a holder renews well within it). The
// new KV watcher's initial state replaces every view, so a key that aged out in
// the meantime shows as absent.
type watcher struct {
	kv    jetstream.KeyValue
	keys  []string // the keys to watch; nil watches the whole bucket
	ttl   time.Duration
	log   *slog.Logger
	clock Clock // when entries arrive, and how long the bucket is silent

	mu        sync.Mutex
	views     map[string]*keyView            // by key: every key seen or subscribed to
	records   map[string]map[string]struct{} // candidate records' keys, by election key
	subs      map[*subscription]struct{}
	ready     bool                  // the first KV watcher delivered its initial state
	readyCh   chan struct{}         // closed when ready turns true
	lastMsg   time.Time             // when the KV watcher last delivered anything
	seenRev   uint64                // the highest revision the KV watcher delivered
	expected  uint64                // the highest revision this process wrote
	expectAt  time.Time             // since when the KV watcher owes a write of this process, without progress
	intervals map[time.Duration]int // the campaign intervals of the elections running here, counted
	replaced  int                   // KV watchers replaced as stalled so far
	reason    string                // why the latest was replaced

	// What the current KV watcher may have missed, for observers to tell a
	// holder's claim from its renewal (keyEntry.follows). synced is the
	// highest revision of its initial state, delivered the highest revision
	// it delivered since, and gapEnd the first revision it delivered after
	// skipping some (0: none skipped since the initial state). A revision
	// is skipped when the server removed it before sending it: replaced
	// under a one-revision history, or aged out, while the KV watcher lagged.
	synced, delivered, gapEnd uint64
}

// subscription is one subscriber's interest in one key, or in every election key
// under a prefix: changed receives a value (buffered 1, so signals
// coalesce) whenever the view of such a key changes.
type subscription struct {
	key     string // the key, or with prefix the prefix
	prefix  bool
	changed chan struct{}
	logs    bool       // keep every entry, for observers
	entries []keyEntry // kept entries not yet drained
}

// keyEntry is an entry of a key (nil: the key has none).
type keyEntry struct {
	key   string
	entry jetstream.KeyValueEntry
	// follows says that entry is the write right after the key's previous
	// entry the watcher had (or after none, for a key that had none): the
	// KV watcher delivered every revision of the bucket in between. False for
	// a KV watcher's initial state and a subscriber's first entries.
	follows bool
}

// covers reports whether s is interested in key.
func (s *subscription) covers(key string) bool {
	if s.prefix {
		return strings.HasPrefix(key, s.key) && !strings.HasPrefix(key, reservedPrefix)
	}
	return key == s.key
}

// watchAbortGrace is how long a KV watcher's creation may go on after the
// watcher was told to stop; see watcher.tryKVWatcher.
const watchAbortGrace = time.Second

// echoTimeout is how long the watcher waits for its KV watcher to deliver a
// write this process made before it replaces the KV watcher.
const echoTimeout = time.Second

func newWatcher(kv jetstream.KeyValue, keys []string, ttl time.Duration, clk Clock, log *slog.Logger) *watcher {
	return &watcher{
		kv:        kv,
		clock:     clk,
		keys:      keys,
		ttl:       ttl,
		log:       log,
		views:     make(map[string]*keyView),
		records:   make(map[string]map[string]struct{}),
		subs:      make(map[*subscription]struct{}),
		intervals: make(map[time.Duration]int),
		readyCh:   make(chan struct{}),
	}
}

// quietLimitLocked is how long the bucket may stay silent while a key is
// held before the watcher suspects its KV watcher: a holder renews once per
// campaign interval, so the limit is the validity of the longest interval
// of the elections running here, and at least that of the default interval
// (defaultTiming). A holder elsewhere with a longer interval makes the watcher replace
// its KV watcher needlessly, once per renewal.
func (w *watcher) quietLimitLocked() time.Duration {
	limit := defaultTiming(w.ttl).validity
	for i := range w.intervals {
		limit = max(limit, newTiming(w.ttl, i).validity)
	}
	return limit
}

// noteInterval counts an election renewing every interval in (delta 1) or
// out (-1).
func (w *watcher) noteInterval(interval time.Duration, delta int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.intervals[interval] += delta
	if w.intervals[interval] <= 0 {
		delete(w.intervals, interval)
	}
}

// subscribe registers interest in key; the caller reads the view with view
// and must unsubscribe.
func (w *watcher) subscribe(key string) *subscription {
	return w.add(&subscription{key: key, changed: make(chan struct{}, 1)})
}

// subscribeLog registers interest in every entry of key, and subscribePrefix
// in every entry of each election key under prefix, which the caller takes
// with takeEntries; if the watcher is ready, the latest entry of each such key comes
// first (for one key, a nil entry if it has none).
func (w *watcher) subscribeLog(key string) *subscription {
	return w.add(&subscription{key: key, changed: make(chan struct{}, 1), logs: true})
}

func (w *watcher) subscribePrefix(prefix string) *subscription {
	return w.add(&subscription{key: prefix, prefix: true, changed: make(chan struct{}, 1), logs: true})
}

// takeEntries returns whether the watcher is ready and the entries kept for s.
func (w *watcher) takeEntries(s *subscription) (bool, []keyEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	entries := s.entries
	s.entries = nil
	return w.ready, entries
}

// snapshot returns a copy of every view.
func (w *watcher) snapshot() map[string]keyView {
	w.mu.Lock()
	defer w.mu.Unlock()
	views := make(map[string]keyView, len(w.views))
	for key, v := range w.views {
		copied := *v
		copied.ready = w.ready
		views[key] = copied
	}
	return views
}

func (w *watcher) add(s *subscription) *subscription {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs[s] = struct{}{}
	if s.logs && w.ready {
		switch {
		case s.prefix:
			for key, v := range w.views {
				if s.covers(key) {
					s.entries = append(s.entries, keyEntry{key: key, entry: v.latest})
				}
			}
		default:
			e := keyEntry{key: s.key}
			if v := w.views[s.key]; v != nil {
				e.entry = v.latest
			}
			s.entries = append(s.entries, e)
		}
		s.changed <- struct{}{}
	}
	return s
}

func (w *watcher) unsubscribe(s *subscription) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.subs, s)
}

// view returns a copy of what the watcher knows of key.
func (w *watcher) view(key string) keyView {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := keyView{ready: w.ready}
	if kv := w.views[key]; kv != nil {
		if strings.HasPrefix(key, candidatePrefix) {
			kv.record() // parsed here, once, rather than in every copy
		}
		v.latest, v.seenAt, v.rec, v.parsed = kv.latest, kv.seenAt, kv.rec, kv.parsed
	}
	return v
}

// wrote tells the watcher that this process wrote revision rev, which its
// KV watcher must deliver soon.
func (w *watcher) wrote(rev uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.expected <= w.seenRev {
		w.expectAt = w.clock.Now() // nothing was owed: the clock starts now
	}
	w.expected = max(w.expected, rev)
}

// highest returns the highest revision the KV watcher delivered or this
// process wrote: every revision the store gives out later must be above it.
func (w *watcher) highest() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(w.seenRev, w.expected)
}

// progressLocked records that the KV watcher delivered revision rev: a write
// still owed is owed from now on.
func (w *watcher) progressLocked(rev uint64) {
	w.lastMsg = w.clock.Now()
	if rev > w.seenRev {
		w.seenRev = rev
		w.expectAt = w.lastMsg
	}
}

// run keeps a KV watcher on the bucket until ctx is done.
func (w *watcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		w.mu.Lock()
		written := w.expected // the new KV watcher's initial state includes every write acknowledged so far
		w.mu.Unlock()
		kw, done := w.startKVWatcher(ctx)
		if kw == nil {
			return
		}
		w.consume(ctx, kw, written)
		_ = kw.Stop()
		done()
		go discardUpdates(kw)
	}
}

// discardUpdates reads what a stopped KV watcher still delivers until it closes its
// channel: nats.go delivers with a blocking send, and its subscription ends
// (and closes the channel) only once no send is blocked.
func discardUpdates(kw jetstream.KeyWatcher) {
	for range kw.Updates() {
	}
}

// startKVWatcher starts a KV watcher, retrying until ctx is done (nil then).
// done must be called once the KV watcher is stopped.
func (w *watcher) startKVWatcher(ctx context.Context) (jetstream.KeyWatcher, context.CancelFunc) {
	wait := 50 * time.Millisecond
	for {
		kw, done, err := w.tryKVWatcher(ctx)
		if err == nil {
			return kw, done
		}
		if len(w.keys) > 1 && isMultiFilterUnsupported(err) {
			w.log.Warn("the server predates consumers with several filters (nats-server 2.10); watching the key alone, so requests to resign or transfer reach this election only if it is made from a Bucket", "error", err)
			w.keys = w.keys[:1]
			continue
		}
		w.log.Warn("cannot watch the bucket; retrying", append(errAttrs(err), "retry_in", wait)...)
		if !sleep(ctx, wait) {
			return nil, nil
		}
		wait = min(wait*2, w.ttl/4)
	}
}

// tryKVWatcher makes one KV watcher (nil, with no error, if ctx ended
// first). done must be called once the KV watcher is stopped.
//
// The KV watcher gets a context of its own, which ctx's end does not reach
// once it exists: nats.go unsubscribes a KV watcher when its context ends,
// in a goroutine of its own. That goroutine would race the watcher's Stop, and
// Stop would return while the consumer's deletion was still in flight, to be
// lost when the connection closed (the consumer then stays on the server
// until its inactivity threshold, 5-6 s). For the same reason, if ctx ends
// while the KV watcher is being created, the creation is given
// watchAbortGrace to finish, so that the watcher can stop the new KV watcher
// itself; only a creation that takes longer (the server unreachable) is
// aborted.
func (w *watcher) tryKVWatcher(ctx context.Context) (kw jetstream.KeyWatcher, done context.CancelFunc, err error) {
	watchCtx, cancel := context.WithCancel(context.Background())
	created := make(chan struct{})
	stopAborting := context.AfterFunc(ctx, func() {
		select {
		case <-created:
		case <-time.After(watchAbortGrace):
			cancel()
		}
	})
	if w.keys == nil {
		kw, err = w.kv.WatchAll(watchCtx)
	} else {
		// A copy: WatchFiltered rewrites the slice it is given.
		kw, err = w.kv.WatchFiltered(watchCtx, append([]string(nil), w.keys...))
	}
	close(created)
	switch {
	case !stopAborting(): // ctx ended during the call
		if err == nil {
			_ = kw.Stop()
		}
		cancel()
		return nil, nil, nil
	case err != nil:
		cancel()
		return nil, nil, err
	}
	return kw, cancel, nil
}

// consume applies the KV watcher's entries until ctx is done or the KV
// watcher must be replaced. Its initial state is gathered apart and replaces every
// view at once when complete; it reflects this process's writes up to
// revision written.
func (w *watcher) consume(ctx context.Context, kw jetstream.KeyWatcher, written uint64) {
	w.mu.Lock()
	w.lastMsg = w.clock.Now()
	w.mu.Unlock()
	initial := make(map[string]jetstream.KeyValueEntry)
	synced := false
	check := time.NewTicker(w.clock.Real(min(w.ttl/8, 250*time.Millisecond)))
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-kw.Updates():
			if !ok {
				w.log.Warn("the bucket watcher ended; replacing it")
				return
			}
			switch {
			case e == nil:
				w.resync(initial, written)
				initial, synced = nil, true
			case !synced:
				initial[e.Key()] = e
				w.heard(e.Revision())
			default:
				w.apply(e)
			}
		case <-check.C:
			if reason := w.stalled(); reason != "" {
				w.log.Warn("the bucket watcher looks stalled; replacing it", "reason", reason)
				w.mu.Lock()
				w.replaced++
				w.reason = reason
				w.mu.Unlock()
				return
			}
		}
	}
}

// heard records that the KV watcher delivered revision rev.
func (w *watcher) heard(rev uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.progressLocked(rev)
}

// apply records a live entry and wakes the key's subscribers.
func (w *watcher) apply(e jetstream.KeyValueEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.progressLocked(e.Revision())
	rev := e.Revision()
	if rev > w.delivered+1 {
		w.gapEnd = rev
	}
	w.delivered = max(w.delivered, rev)
	v := w.views[e.Key()]
	if v == nil {
		v = &keyView{ready: true}
		w.views[e.Key()] = v
		w.indexLocked(e.Key(), true)
	}
	// The key's state is known as of its previous entry, and of the
	// initial state for a key that has none there: nothing was skipped
	// since if the latest skip ended no later.
	known := w.synced
	if v.latest != nil {
		known = max(known, v.latest.Revision())
	}
	follows := w.gapEnd <= known
	if v.advance(e, w.clock.Now()) {
		w.logLocked(e.Key(), e, follows)
		w.wakeLocked(e.Key())
	}
}

// resync replaces every view with a KV watcher's initial state: a key it does
// not mention has no entry. A view whose latest revision is unchanged keeps
// the time it was first seen. The state reflects this process's writes up to
// revision written, even those since replaced or aged out.
func (w *watcher) resync(initial map[string]jetstream.KeyValueEntry, written uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.progressLocked(written)
	w.synced, w.gapEnd = 0, 0
	for _, e := range initial {
		w.synced = max(w.synced, e.Revision())
	}
	w.delivered = w.synced
	if !w.ready {
		w.ready = true
		close(w.readyCh)
	}
	for key, v := range w.views {
		e := initial[key]
		if v.replace(e, w.clock.Now()) {
			w.logLocked(key, e, false)
			w.wakeLocked(key)
		}
		if e == nil {
			delete(w.views, key)
			w.indexLocked(key, false)
		}
	}
	for key, e := range initial {
		if w.views[key] == nil {
			v := &keyView{ready: true}
			v.advance(e, w.clock.Now())
			w.views[key] = v
			w.indexLocked(key, true)
			w.logLocked(key, e, false)
			w.wakeLocked(key)
		}
	}
	for s := range w.subs {
		wake(s) // the first resync makes every view ready
	}
}

// logLocked keeps e (nil: no entry) for the key's observers; follows as
// keyEntry's.
func (w *watcher) logLocked(key string, e jetstream.KeyValueEntry, follows bool) {
	for s := range w.subs {
		if s.logs && s.covers(key) {
			s.entries = append(s.entries, keyEntry{key: key, entry: e, follows: follows})
		}
	}
}

func (w *watcher) wakeLocked(key string) {
	for s := range w.subs {
		if s.covers(key) {
			wake(s)
		}
	}
}

// wake signals s, unless a signal is already pending.
func wake(s *subscription) {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// stalled tells why the KV watcher should be replaced, or "" if it need not.
func (w *watcher) stalled() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	switch {
	case w.expected > w.seenRev && now.Sub(w.expectAt) > echoTimeout:
		return "a write of this process was not delivered"
	case now.Sub(w.lastMsg) > w.quietLimitLocked() && w.anyHeldLocked():
		return "a key is held but the bucket was silent"
	}
	return ""
}

func (w *watcher) anyHeldLocked() bool {
	for key, v := range w.views {
		if v.held() && !strings.HasPrefix(key, reservedPrefix) {
			return true
		}
	}
	return false
}

// indexLocked adds the view of key to the index of candidate records, or
// removes it, if key is a record's.
func (w *watcher) indexLocked(key string, add bool) {
	electionKey, ok := electionKeyOf(key)
	switch {
	case !ok:
	case add && w.records[electionKey] == nil:
		w.records[electionKey] = map[string]struct{}{key: {}}
	case add:
		w.records[electionKey][key] = struct{}{}
	default:
		delete(w.records[electionKey], key)
		if len(w.records[electionKey]) == 0 {
			delete(w.records, electionKey)
		}
	}
}

// candidates returns the live candidates of key ("": of every key), sorted
// by key and name: those whose record the KV watcher delivered within the last
// ttl.
func (w *watcher) candidates(key string, ttl time.Duration) []Candidate {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Candidate
	add := func(electionKey string, records map[string]struct{}) {
		for k := range records {
			v := w.views[k]
			if v == nil || v.latest == nil || w.clock.Now().Sub(v.seenAt) >= ttl {
				continue
			}
			if r, ok := v.record(); ok {
				out = append(out, r.candidate(electionKey))
			}
		}
	}
	if key != "" {
		add(key, w.records[key])
	} else {
		for electionKey, records := range w.records {
			add(electionKey, records)
		}
	}
	slices.SortFunc(out, func(a, b Candidate) int {
		return strings.Compare(a.Key+"\x00"+a.Name, b.Key+"\x00"+b.Name)
	})
	return out
}
