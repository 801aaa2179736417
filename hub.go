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

// hub is one watcher on the server, shared by every election and observer of
// a bucket in this process. It keeps a keyView per key and wakes the
// subscribers of a key when its view changes.
//
// A watcher can stall for 10–20 s when its server dies (the ordered
// consumer's heartbeat check), and it never reports a key that aged out on a
// bucket without expiry markers. The hub therefore replaces its watcher
// whenever the stream should have spoken and did not: it owes this process
// a write and delivers nothing new for echoTimeout, or a key is held and the whole
// bucket stays silent for quietLimit (a holder renews well within it). The
// new watcher's initial state replaces every view, so a key that aged out in
// the meantime shows as absent.
type hub struct {
	kv    jetstream.KeyValue
	keys  []string // the keys to watch; nil watches the whole bucket
	ttl   time.Duration
	log   *slog.Logger
	clock Clock // when entries arrive, and how long the bucket is silent

	mu        sync.Mutex
	views     map[string]*keyView            // by key: every key seen or subscribed to
	records   map[string]map[string]struct{} // candidate records' keys, by election key
	subs      map[*hubSub]struct{}
	ready     bool                  // the first watcher delivered its initial state
	readyCh   chan struct{}         // closed when ready turns true
	lastMsg   time.Time             // when the watcher last delivered anything
	seenRev   uint64                // the highest revision the watcher delivered
	expected  uint64                // the highest revision this process wrote
	expectAt  time.Time             // since when the watcher owes a write of this process, without progress
	intervals map[time.Duration]int // the campaign intervals of the elections running here, counted
	replaced  int                   // watchers replaced as stalled so far
	reason    string                // why the latest was replaced

	// What the current watcher may have missed, for observers to tell a
	// holder's claim from its renewal (keyEntry.follows). synced is the
	// highest revision of its initial state, delivered the highest revision
	// it delivered since, and gapEnd the first revision it delivered after
	// skipping some (0: none skipped since the initial state). A revision
	// is skipped when the server removed it before sending it: replaced
	// under a one-revision history, or aged out, while the watcher lagged.
	synced, delivered, gapEnd uint64
}

// hubSub is one subscriber's interest in one key, or in every election key
// under a prefix: changed receives a value (buffered 1, so signals
// coalesce) whenever the view of such a key changes.
type hubSub struct {
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
	// entry the hub had (or after none, for a key that had none): the
	// watcher delivered every revision of the bucket in between. False for
	// a watcher's initial state and a subscriber's first entries.
	follows bool
}

// covers reports whether s is interested in key.
func (s *hubSub) covers(key string) bool {
	if s.prefix {
		return strings.HasPrefix(key, s.key) && !strings.HasPrefix(key, reservedPrefix)
	}
	return key == s.key
}

// watchAbortGrace is how long a watcher's creation may go on after the hub
// was told to stop; see hub.startWatcher.
const watchAbortGrace = time.Second

// echoTimeout is how long the hub waits for its watcher to deliver a write
// this process made before it replaces the watcher.
const echoTimeout = time.Second

func newHub(kv jetstream.KeyValue, keys []string, ttl time.Duration, clk Clock, log *slog.Logger) *hub {
	return &hub{
		kv:        kv,
		clock:     clk,
		keys:      keys,
		ttl:       ttl,
		log:       log,
		views:     make(map[string]*keyView),
		records:   make(map[string]map[string]struct{}),
		subs:      make(map[*hubSub]struct{}),
		intervals: make(map[time.Duration]int),
		readyCh:   make(chan struct{}),
	}
}

// quietLimitLocked is how long the bucket may stay silent while a key is
// held before the hub suspects its watcher: a holder renews once per
// campaign interval, so the limit is the validity of the longest interval
// of the elections running here, and at least that of the default interval
// (defaultTiming). A holder elsewhere with a longer interval makes the hub replace
// its watcher needlessly, once per renewal.
func (h *hub) quietLimitLocked() time.Duration {
	limit := defaultTiming(h.ttl).validity
	for i := range h.intervals {
		limit = max(limit, newTiming(h.ttl, i).validity)
	}
	return limit
}

// noteInterval counts an election renewing every interval in (delta 1) or
// out (-1).
func (h *hub) noteInterval(interval time.Duration, delta int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.intervals[interval] += delta
	if h.intervals[interval] <= 0 {
		delete(h.intervals, interval)
	}
}

// subscribe registers interest in key; the caller reads the view with view
// and must unsubscribe.
func (h *hub) subscribe(key string) *hubSub {
	return h.add(&hubSub{key: key, changed: make(chan struct{}, 1)})
}

// subscribeLog registers interest in every entry of key, and subscribePrefix
// in every entry of each election key under prefix, which the caller takes
// with drain; if the hub is ready, the latest entry of each such key comes
// first (for one key, a nil entry if it has none).
func (h *hub) subscribeLog(key string) *hubSub {
	return h.add(&hubSub{key: key, changed: make(chan struct{}, 1), logs: true})
}

func (h *hub) subscribePrefix(prefix string) *hubSub {
	return h.add(&hubSub{key: prefix, prefix: true, changed: make(chan struct{}, 1), logs: true})
}

// drain returns whether the hub is ready and the entries kept for s.
func (h *hub) drain(s *hubSub) (bool, []keyEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	entries := s.entries
	s.entries = nil
	return h.ready, entries
}

// snapshot returns a copy of every view.
func (h *hub) snapshot() map[string]keyView {
	h.mu.Lock()
	defer h.mu.Unlock()
	views := make(map[string]keyView, len(h.views))
	for key, v := range h.views {
		copied := *v
		copied.ready = h.ready
		views[key] = copied
	}
	return views
}

func (h *hub) add(s *hubSub) *hubSub {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[s] = struct{}{}
	if s.logs && h.ready {
		switch {
		case s.prefix:
			for key, v := range h.views {
				if s.covers(key) {
					s.entries = append(s.entries, keyEntry{key: key, entry: v.latest})
				}
			}
		default:
			e := keyEntry{key: s.key}
			if v := h.views[s.key]; v != nil {
				e.entry = v.latest
			}
			s.entries = append(s.entries, e)
		}
		s.changed <- struct{}{}
	}
	return s
}

func (h *hub) unsubscribe(s *hubSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
}

// view returns a copy of what the hub knows of key.
func (h *hub) view(key string) keyView {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := keyView{ready: h.ready}
	if kv := h.views[key]; kv != nil {
		if strings.HasPrefix(key, candidatePrefix) {
			kv.record() // parsed here, once, rather than in every copy
		}
		v.latest, v.seenAt, v.rec, v.parsed = kv.latest, kv.seenAt, kv.rec, kv.parsed
	}
	return v
}

// wrote tells the hub that this process wrote revision rev, which its
// watcher must deliver soon.
func (h *hub) wrote(rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.expected <= h.seenRev {
		h.expectAt = h.clock.Now() // nothing was owed: the clock starts now
	}
	h.expected = max(h.expected, rev)
}

// highest returns the highest revision the watcher delivered or this
// process wrote: every revision the store gives out later must be above it.
func (h *hub) highest() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(h.seenRev, h.expected)
}

// progressLocked records that the watcher delivered revision rev: a write
// still owed is owed from now on.
func (h *hub) progressLocked(rev uint64) {
	h.lastMsg = h.clock.Now()
	if rev > h.seenRev {
		h.seenRev = rev
		h.expectAt = h.lastMsg
	}
}

// run keeps a watcher on the bucket until ctx is done.
func (h *hub) run(ctx context.Context) {
	for ctx.Err() == nil {
		h.mu.Lock()
		written := h.expected // the new watcher's initial state includes every write acknowledged so far
		h.mu.Unlock()
		w, done := h.watch(ctx)
		if w == nil {
			return
		}
		h.consume(ctx, w, written)
		_ = w.Stop()
		done()
		go drain(w)
	}
}

// drain reads what a stopped watcher still delivers until it closes its
// channel: nats.go delivers with a blocking send, and its subscription ends
// (and closes the channel) only once no send is blocked.
func drain(w jetstream.KeyWatcher) {
	for range w.Updates() {
	}
}

// watch starts a watcher, retrying until ctx is done (nil then). done must
// be called once the watcher is stopped.
func (h *hub) watch(ctx context.Context) (jetstream.KeyWatcher, context.CancelFunc) {
	wait := 50 * time.Millisecond
	for {
		w, done, err := h.startWatcher(ctx)
		if err == nil {
			return w, done
		}
		if len(h.keys) > 1 && isMultiFilterUnsupported(err) {
			h.log.Warn("the server predates consumers with several filters (nats-server 2.10); watching the key alone, so requests to resign or transfer reach this election only if it is made from a Bucket", "error", err)
			h.keys = h.keys[:1]
			continue
		}
		h.log.Warn("cannot watch the bucket; retrying", append(errAttrs(err), "retry_in", wait)...)
		if !sleep(ctx, wait) {
			return nil, nil
		}
		wait = min(wait*2, h.ttl/4)
	}
}

// startWatcher makes one watcher (nil, with no error, if ctx ended first).
// done must be called once the watcher is stopped.
//
// The watcher gets a context of its own, which ctx's end does not reach once
// the watcher exists: nats.go unsubscribes a watcher when its context ends,
// in a goroutine of its own. That goroutine would race the hub's Stop, and
// Stop would return while the consumer's deletion was still in flight, to be
// lost when the connection closed (the consumer then stays on the server
// until its inactivity threshold, 5-6 s). For the same reason, if ctx ends
// while the watcher is being created, the creation is given
// watchAbortGrace to finish, so that the hub can stop the new watcher
// itself; only a creation that takes longer (the server unreachable) is
// aborted.
func (h *hub) startWatcher(ctx context.Context) (w jetstream.KeyWatcher, done context.CancelFunc, err error) {
	watchCtx, cancel := context.WithCancel(context.Background())
	created := make(chan struct{})
	stopAborting := context.AfterFunc(ctx, func() {
		select {
		case <-created:
		case <-time.After(watchAbortGrace):
			cancel()
		}
	})
	if h.keys == nil {
		w, err = h.kv.WatchAll(watchCtx)
	} else {
		// A copy: WatchFiltered rewrites the slice it is given.
		w, err = h.kv.WatchFiltered(watchCtx, append([]string(nil), h.keys...))
	}
	close(created)
	switch {
	case !stopAborting(): // ctx ended during the call
		if err == nil {
			_ = w.Stop()
		}
		cancel()
		return nil, nil, nil
	case err != nil:
		cancel()
		return nil, nil, err
	}
	return w, cancel, nil
}

// consume applies the watcher's entries until ctx is done or the watcher
// must be replaced. Its initial state is gathered apart and replaces every
// view at once when complete; it reflects this process's writes up to
// revision written.
func (h *hub) consume(ctx context.Context, w jetstream.KeyWatcher, written uint64) {
	h.mu.Lock()
	h.lastMsg = h.clock.Now()
	h.mu.Unlock()
	initial := make(map[string]jetstream.KeyValueEntry)
	synced := false
	check := time.NewTicker(h.clock.Real(min(h.ttl/8, 250*time.Millisecond)))
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				h.log.Warn("the bucket watcher ended; replacing it")
				return
			}
			switch {
			case e == nil:
				h.resync(initial, written)
				initial, synced = nil, true
			case !synced:
				initial[e.Key()] = e
				h.heard(e.Revision())
			default:
				h.apply(e)
			}
		case <-check.C:
			if reason := h.stalled(); reason != "" {
				h.log.Warn("the bucket watcher looks stalled; replacing it", "reason", reason)
				h.mu.Lock()
				h.replaced++
				h.reason = reason
				h.mu.Unlock()
				return
			}
		}
	}
}

// heard records that the watcher delivered revision rev.
func (h *hub) heard(rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.progressLocked(rev)
}

// apply records a live entry and wakes the key's subscribers.
func (h *hub) apply(e jetstream.KeyValueEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.progressLocked(e.Revision())
	rev := e.Revision()
	if rev > h.delivered+1 {
		h.gapEnd = rev
	}
	h.delivered = max(h.delivered, rev)
	v := h.views[e.Key()]
	if v == nil {
		v = &keyView{ready: true}
		h.views[e.Key()] = v
		h.indexLocked(e.Key(), true)
	}
	// The key's state is known as of its previous entry, and of the
	// initial state for a key that has none there: nothing was skipped
	// since if the latest skip ended no later.
	known := h.synced
	if v.latest != nil {
		known = max(known, v.latest.Revision())
	}
	follows := h.gapEnd <= known
	if v.observe(e, h.clock.Now()) {
		h.logLocked(e.Key(), e, follows)
		h.wakeLocked(e.Key())
	}
}

// resync replaces every view with a watcher's initial state: a key it does
// not mention has no entry. A view whose latest revision is unchanged keeps
// the time it was first seen. The state reflects this process's writes up to
// revision written, even those since replaced or aged out.
func (h *hub) resync(initial map[string]jetstream.KeyValueEntry, written uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.progressLocked(written)
	h.synced, h.gapEnd = 0, 0
	for _, e := range initial {
		h.synced = max(h.synced, e.Revision())
	}
	h.delivered = h.synced
	if !h.ready {
		h.ready = true
		close(h.readyCh)
	}
	for key, v := range h.views {
		e := initial[key]
		if v.replace(e, h.clock.Now()) {
			h.logLocked(key, e, false)
			h.wakeLocked(key)
		}
		if e == nil {
			delete(h.views, key)
			h.indexLocked(key, false)
		}
	}
	for key, e := range initial {
		if h.views[key] == nil {
			v := &keyView{ready: true}
			v.observe(e, h.clock.Now())
			h.views[key] = v
			h.indexLocked(key, true)
			h.logLocked(key, e, false)
			h.wakeLocked(key)
		}
	}
	for s := range h.subs {
		wake(s) // the first resync makes every view ready
	}
}

// logLocked keeps e (nil: no entry) for the key's observers; follows as
// keyEntry's.
func (h *hub) logLocked(key string, e jetstream.KeyValueEntry, follows bool) {
	for s := range h.subs {
		if s.logs && s.covers(key) {
			s.entries = append(s.entries, keyEntry{key: key, entry: e, follows: follows})
		}
	}
}

func (h *hub) wakeLocked(key string) {
	for s := range h.subs {
		if s.covers(key) {
			wake(s)
		}
	}
}

// wake signals s, unless a signal is already pending.
func wake(s *hubSub) {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// stalled tells why the watcher should be replaced, or "" if it need not.
func (h *hub) stalled() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	switch {
	case h.expected > h.seenRev && now.Sub(h.expectAt) > echoTimeout:
		return "a write of this process was not delivered"
	case now.Sub(h.lastMsg) > h.quietLimitLocked() && h.anyHeldLocked():
		return "a key is held but the bucket was silent"
	}
	return ""
}

func (h *hub) anyHeldLocked() bool {
	for key, v := range h.views {
		if v.held() && !strings.HasPrefix(key, reservedPrefix) {
			return true
		}
	}
	return false
}

// indexLocked adds the view of key to the index of candidate records, or
// removes it, if key is a record's.
func (h *hub) indexLocked(key string, add bool) {
	electionKey, ok := electionKeyOf(key)
	switch {
	case !ok:
	case add && h.records[electionKey] == nil:
		h.records[electionKey] = map[string]struct{}{key: {}}
	case add:
		h.records[electionKey][key] = struct{}{}
	default:
		delete(h.records[electionKey], key)
		if len(h.records[electionKey]) == 0 {
			delete(h.records, electionKey)
		}
	}
}

// candidates returns the live candidates of key ("": of every key), sorted
// by key and name: those whose record the watcher delivered within the last
// ttl.
func (h *hub) candidates(key string, ttl time.Duration) []Candidate {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Candidate
	add := func(electionKey string, records map[string]struct{}) {
		for k := range records {
			v := h.views[k]
			if v == nil || v.latest == nil || h.clock.Now().Sub(v.seenAt) >= ttl {
				continue
			}
			if r, ok := v.record(); ok {
				out = append(out, r.candidate(electionKey))
			}
		}
	}
	if key != "" {
		add(key, h.records[key])
	} else {
		for electionKey, records := range h.records {
			add(electionKey, records)
		}
	}
	slices.SortFunc(out, func(a, b Candidate) int {
		return strings.Compare(a.Key+"\x00"+a.Name, b.Key+"\x00"+b.Name)
	})
	return out
}
