package election

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// An election's campaign runs in phases, a file each: claim.go waits for
// the key to be free and claims it; hold.go holds a tenure, renewing the key
// and announcing leadership; release.go ends it, standing down and
// releasing, vouching for or handing over the key. This file holds the
// campaigner, its tenure, and the loop that takes it through the phases,
// tenure after tenure.

// campaigner is the goroutine behind Start: it campaigns while a candidate and
// renews while it holds the key. Its fields are the campaign's own state,
// which only the campaign goroutine touches, but for those made safe to share
// (rtt, workDone, clockRate) with the goroutine that keeps the candidate
// record (present) and with Once's work. What others may read (state,
// validity deadline, token) it publishes through its election, e, under
// e.mu.
type campaigner struct {
	e         *Election // the election it campaigns for, and its configuration (name, key, opts, timing, clock, log)
	callbacks *callbackQueue
	watcher   *watcher              // the watcher this election shares
	sub       *subscription         // wakes the campaigner when the key's view changes
	requests  *subscription         // wakes it when a request to the leader is written
	sitOutRev uint64                // the revision of this node's own resignation: it does not claim over it for half a TTL
	since     time.Time             // when this node began to campaign for its next tenure
	work      func(context.Context) // Once's work, run after OnWon when this node leads
	workDone  atomic.Bool           // Once's run leaves a mark on the key (doOnce): the release marks the key done
	marked    bool                  // Once's done mark was confirmed written (markDone)
	pref      preference            // with WithPreferHigher: the higher candidates seen while leading
	listed    time.Time             // the end of the first campaign's listing window (priority.go); zero: none
	rtt       roundTrips            // recent round trips to the bucket (roundtrip.go)

	// kv is the election's bucket with every acknowledged write noted for
	// the clock checks (clockedKV), in place of e.kv, so that every write of
	// the campaigner's, in any file, is measured.
	kv        jetstream.KeyValue
	clocks    *clockWatch   // what the clock checks measured (clockcheck.go)
	clockRate atomic.Uint64 // the latest measured ClockCheck.Rate (math.Float64bits) for the candidate record; 0: none yet
	clockWake chan struct{} // buffered 1: the lease watch saw IsLeader turn false

	health        *healthGate // WithHealthCheck's checks (healthgate.go); nil: none
	healthFailing bool        // the latest verdict published (noteHealth) was a failure
}

// newCampaigner makes the campaigner of e, which runs callbacks on
// callbacks and watches its key through w.
func newCampaigner(e *Election, callbacks *callbackQueue, w *watcher) *campaigner {
	clocks := &clockWatch{}
	return &campaigner{
		e:         e,
		callbacks: callbacks,
		watcher:   w,
		kv:        &clockedKV{KeyValue: e.kv, clock: e.clock, watch: clocks},
		clocks:    clocks,
		clockWake: make(chan struct{}, 1),
	}
}

// tenure is this node's hold on the key, from the Create that won it to
// stand-down.
type tenure struct {
	token      uint64          // revision of the winning Create: the fencing token
	revision   uint64          // latest revision this node wrote
	unsure     bool            // a renewal over revision was sent and its answer lost: the server may have applied it
	lastSent   time.Time       // when the latest acknowledged write was sent
	slept      time.Duration   // what the clock reported as slept right before it was sent (sleptSince)
	announceAt time.Time       // when leadership may be announced
	confirm    bool            // announce only after a renewal sent at or after announceAt was acknowledged
	lead       *leadership     // nil until leadership is announced, and again after stand-down
	announced  bool            // leadership was announced in this tenure
	after      string          // how the key became free before the claim, for the history
	returned   <-chan struct{} // closed once OnWon (and Once's work) of this tenure returned; nil if never announced
}

// leadership is an announced tenure: the context handed to OnWon, and the
// timer that cancels it at the validity deadline even if the campaigner is
// blocked in a KV call.
type leadership struct {
	ctx    context.Context
	cancel context.CancelCauseFunc // with why the leadership ended (context.Cause)
	unlink func() bool             // stops ending ctx with the campaign's context
	expiry *time.Timer
	watch  *leaseWatch // cancels ctx once IsLeader turns false, as after a suspend; nil if the clock cannot tell
	since  time.Time   // when leadership was announced
}

// run is Start's campaign: it campaigns and holds the key, tenure after
// tenure, until ctx is done.
func (c *campaigner) run(ctx context.Context) {
	defer c.begin(ctx)()
	if c.e.opts.priority == 0 { // a standby: listed, never claiming
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.healthWake():
				c.noteHealth()
			}
		}
	}
	if !c.awaitFirstCheck(ctx) {
		return
	}
	if !c.splay(ctx) {
		return
	}
	if !c.awaitListing(ctx) {
		return
	}
	for {
		t, _ := c.campaign(ctx, endNever)
		if t == nil {
			return
		}
		c.hold(ctx, t)
		if ctx.Err() != nil || !c.awaitReturn(ctx, t) {
			return
		}
	}
}

// awaitReturn waits, before this node campaigns again, until the OnWon of
// the tenure t has returned, and reports false if ctx was done first. A
// node whose last leadership's work has not stopped could not start its
// next anyway (callbacks run in order), so it leaves the key to the others.
func (c *campaigner) awaitReturn(ctx context.Context, t *tenure) bool {
	if t.returned == nil {
		return true
	}
	select {
	case <-t.returned:
		return true
	default:
	}
	c.e.log.Warn("the work of the last leadership has not stopped; not campaigning until it does", "revision", t.token)
	for {
		select {
		case <-t.returned:
			c.e.log.Info("the work of the last leadership stopped; campaigning again", "revision", t.token)
			return true
		case <-ctx.Done():
			return false
		case <-c.healthWake():
			c.noteHealth() // published while waiting, as while campaigning
		}
	}
}

// begin starts campaigning: it counts the campaign in the metrics and the
// watcher, subscribes to the key and to requests to its leader, and waits for
// this node's candidate record. It returns the function that undoes it.
func (c *campaigner) begin(ctx context.Context) (end func()) {
	c.since = c.e.now()
	c.emit(Event{Kind: EventCampaigning, Duration: c.e.timing.interval})
	c.sub = c.watcher.subscribe(c.e.key)
	c.watcher.noteInterval(c.e.timing.interval, 1)
	c.requests = c.watcher.subscribe(requestKey(c.e.key))
	if !c.e.opts.noPresence {
		c.awaitOwnRecord(ctx)
	}
	return func() {
		c.watcher.unsubscribe(c.requests)
		c.watcher.noteInterval(c.e.timing.interval, -1)
		c.watcher.unsubscribe(c.sub)
		c.emit(Event{Kind: EventStopped, Duration: c.e.timing.opTimeout})
	}
}

func (c *campaigner) notifyCampaign() {
	if c.e.opts.onCampaign != nil {
		c.e.opts.onCampaign(c.e.State())
	}
}

// sleep waits for d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
