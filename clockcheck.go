package election

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The clocks checked while an election runs. timing.go states what the
// election assumes of its clocks; three departures from it can be seen
// from data the election already has, and each is acted on here:
//
//   - Suspend: the machine slept and the election's clock stood still (its
//     clock is a SuspendReporter: Linux's machine clock is). A deadline
//     counted over the sleep proves nothing, so a tenure whose latest
//     acknowledged write was sent before the machine slept cannot be
//     vouched for: the node stands down at once (ErrSuspended), renews and
//     vouches nothing over it, and IsLeader turns false the moment the
//     clock reports the sleep (sleptSince, clock.go, is the rule).
//   - Clock rate: every acknowledged write of the election (a claim, a
//     renewal, a vouch, a candidate record) gives the times it was sent and
//     answered on the election's clock, and the stream leader's stamp on it
//     (the entry's Created, which the watcher delivers). Over a sliding
//     window, the stamps' advance against the local clock's gives the rate
//     of the local clock against the stream leader's, with bounds that
//     round trips cannot break: a stamp was made between its write's send
//     and answer. Beyond half of ClockRate (surely, by those bounds) the
//     election warns; beyond ClockRate it refuses to lead (ErrClockRate): a
//     leader stands down, a candidate does not claim.
//   - Server clock offsets: when the stream leader changes (or its clock
//     steps), the stamps of consecutive writes jump by the offset between
//     the old and the new clock. A jump beyond what the rate and the two
//     writes' round trips explain is reported (EventClockJump), and warned
//     of (ErrClockOffset) when it exceeds the offset the deadlines allow
//     for (serverOffset, timing.go). The rate is measured across it, never
//     over it.
//
// None of the checks makes an election safer than the clock assumption
// says; each tells the operator that the assumption failed, and the first
// two stop this node from leading on a clock that has.

// Errors of the clock checks. ErrSuspended and ErrClockRate are also
// causes of lost leadership, passed to OnLost and in EventLost.
var (
	// ErrSuspended means the leader stood down because the machine slept
	// since it sent its latest acknowledged write: its clock stood still
	// meanwhile, so its validity deadline proves nothing. How long it
	// slept is in the message.
	ErrSuspended = errors.New("election: the machine was suspended")
	// ErrClockRate means this node's clock runs at a rate against the
	// stream leader's beyond the clock assumption: past ClockRate, the
	// leader stood down (EventLost, OnLost) and the node does not claim
	// the key while it stays past it; past half of it, EventClockRate
	// carries it as a warning. The measured rate and its bounds are in
	// the message.
	ErrClockRate = errors.New("election: clock rate beyond the clock assumption")
	// ErrClockOffset means the stream leader's stamps jumped by more than
	// the server clock offset the deadlines allow for (ServerClockOffset,
	// less below a 2 s TTL): the new stream leader's clock is that far
	// from the old one's, or a server's clock stepped. EventClockJump
	// carries it; the jump is in the message.
	ErrClockOffset = errors.New("election: server clock offset beyond the clock assumption")
)

// ClockCheck is what an election measured of the clocks it relies on, from
// the times it sent its writes and the times the stream leader stamped
// them. EventClockRate sets the rate fields, EventClockJump the jump
// fields.
type ClockCheck struct {
	// Rate is how long one second of this node's clock lasts on the stream
	// leader's wall clock, in seconds: 1 when they agree, 1.03 when this
	// node's clock runs 3% slow against it, 0.97 when 3% fast. The clock
	// assumption holds within 1 ± ClockRate.
	Rate float64
	// RateLow and RateHigh bound Rate: the round trips of the writes
	// measured, and the servers' clock slewing, leave it uncertain by as
	// much. The election acts only on what the bounds prove.
	RateLow, RateHigh float64
	// Span is how long the measurement spans on this node's clock. A rate
	// is given once the writes it is measured from span 5 TTLs; writes
	// older than 30 TTLs are dropped.
	Span time.Duration
	// Jump is how far the stream leader's stamps moved between two
	// consecutive writes of this node beyond what the clocks' rate
	// explains: forward if positive. A jump is reported only when it
	// exceeds JumpError, how much of it the two writes' round trips (and
	// the rate's uncertainty) may explain.
	Jump, JumpError time.Duration
}

// The clock checks' parameters. Spans are in TTLs: an election writes a
// few times per TTL (a renewal per campaign interval, a candidate record
// per third of a TTL), and the rule of docs/topologies.md keeps round trips
// within a fortieth of it, so 5 TTLs measure a rate to within 1%, well
// inside half of ClockRate.
const (
	rateWindowTTLs  = 30  // samples older than this many TTLs are dropped
	rateMinSpanTTLs = 5   // a rate is given only once its measurement spans this many TTLs
	rateMinSamples  = 5   // and uses this many writes at least
	rateMaxSamples  = 256 // samples kept at most
	pendingMax      = 64  // writes kept awaiting their stamp at most
	// rateSlack widens every rate bound: the servers' clocks may slew
	// (NTP: 500 ppm at most) while the local clock is measured against
	// them.
	rateSlack = 1e-3
	// jumpFloor is the least jump reported: stamps and readings are exact
	// to well under it.
	jumpFloor = time.Millisecond
	// minLongPairs is how many pairs of consecutive writes at least a tenth
	// of a TTL apart it takes to judge which pair jumped.
	minLongPairs = 3
	// clockWarnEvery limits the rate warnings in the log to one per this
	// long.
	clockWarnEvery = 10 * time.Minute
)

// clockSample is one acknowledged write of the election: when it was sent
// and its answer came, on the election's clock, what the clock reported as
// slept right before it was sent and right after the answer came
// (SuspendReporter), and the stream leader's stamp on it.
type clockSample struct {
	sent, recv        time.Time
	slept, sleptAfter time.Duration
	stamp             time.Time
	reported          bool // the pair that ends with this sample was reported as a jump
}

func (s *clockSample) roundTrip() time.Duration { return s.recv.Sub(s.sent) }

// pendingWrite is an acknowledged write whose stamp the watcher has not
// delivered yet.
type pendingWrite struct {
	key               string
	rev               uint64
	sent, recv        time.Time
	slept, sleptAfter time.Duration
}

// clockWatch holds what an election measured of its clocks. The writes
// come from any of the election's goroutines (note); the rest is the
// campaign goroutine's.
type clockWatch struct {
	mu      sync.Mutex
	pending []pendingWrite

	samples  []clockSample
	rate     ClockCheck // the latest rate given (Span 0: none yet)
	warnedAt time.Time  // when the rate was last warned of in the log
}

// note records an acknowledged write of revision rev to key, sent and
// answered at the given times.
func (w *clockWatch) note(p pendingWrite) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == pendingMax {
		w.pending = w.pending[1:]
	}
	w.pending = append(w.pending, p)
}

// clockedKV is the bucket as an election's campaigner writes to it: each
// acknowledged write is noted for the clock checks.
type clockedKV struct {
	jetstream.KeyValue
	clock Clock
	watch *clockWatch
}

func (k *clockedKV) noted(key string, write func() (uint64, error)) (uint64, error) {
	slept := suspended(k.clock)
	sent := k.clock.Now()
	rev, err := write()
	if err == nil {
		recv := k.clock.Now()
		k.watch.note(pendingWrite{key: key, rev: rev, sent: sent, recv: recv, slept: slept, sleptAfter: suspended(k.clock)})
	}
	return rev, err
}

func (k *clockedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return k.noted(key, func() (uint64, error) { return k.KeyValue.Put(ctx, key, value) })
}

func (k *clockedKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	return k.noted(key, func() (uint64, error) { return k.KeyValue.Update(ctx, key, value, last) })
}

func (k *clockedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return k.noted(key, func() (uint64, error) { return k.KeyValue.Create(ctx, key, value, opts...) })
}

// stamped moves the pending writes whose entries the watcher delivered
// into the samples, drops those it will never deliver (another write came
// first) or has not within a TTL, and drops samples older than the window.
// It reports whether a sample was added.
func (w *clockWatch) stamped(h *watcher, now time.Time, ttl time.Duration) bool {
	w.mu.Lock()
	pending := w.pending
	w.pending = nil
	w.mu.Unlock()
	added := false
	var keep []pendingWrite
	for _, p := range pending {
		e := h.view(p.key).latest
		switch {
		case e != nil && e.Revision() == p.rev:
			w.samples = append(w.samples, clockSample{sent: p.sent, recv: p.recv, slept: p.slept, sleptAfter: p.sleptAfter, stamp: e.Created()})
			added = true
		case e != nil && e.Revision() > p.rev, now.Sub(p.recv) > ttl:
		default:
			keep = append(keep, p)
		}
	}
	if len(keep) > 0 {
		w.mu.Lock()
		w.pending = append(keep, w.pending...)
		w.mu.Unlock()
	}
	if added {
		slices.SortFunc(w.samples, func(a, b clockSample) int { return a.sent.Compare(b.sent) })
	}
	window := now.Add(-rateWindowTTLs * ttl)
	drop := 0
	for drop < len(w.samples) && (w.samples[drop].sent.Before(window) || len(w.samples)-drop > rateMaxSamples) {
		drop++
	}
	w.samples = w.samples[drop:]
	return added
}

// clockPair is two consecutive samples: the stamps advanced by d while the
// local clock advanced by between lo and hi (the earlier answer to the
// later send, the earlier send to the later answer).
type clockPair struct {
	d, lo, hi time.Duration
	broken    bool // the machine slept from the earlier send to the later answer: they measure nothing
}

func pairOf(a, b *clockSample) clockPair {
	return clockPair{
		d:      b.stamp.Sub(a.stamp),
		lo:     b.sent.Sub(a.recv),
		hi:     b.recv.Sub(a.sent),
		broken: b.sleptAfter-a.slept > suspendNoise,
	}
}

// clockFindings is what one look at the samples found.
type clockFindings struct {
	rate  ClockCheck   // Span 0: not enough to go on
	jumps []ClockCheck // jumps not reported before, oldest first
}

// measure looks at the samples (sorted by send time) of an election whose
// bucket has the given TTL.
//
// Jumps first. Each pair of consecutive samples bounds the rate of the local
// clock against the stamps' (its stamps' advance over the local clock's,
// at most and at least: pairOf), unless it jumped. Among the pairs a tenth
// of a TTL or more apart, if most did not jump, the rate lies below the
// median of their upper bounds and above the median of their lower bounds
// (more than half would have to miss it otherwise); a pair whose stamps
// advanced by more or less than that range, over its own local bounds,
// allows, jumped. A jump is judged only once there are minLongPairs such
// pairs, and no rate is given while more than a quarter of all pairs
// jumped.
//
// Then the rate: over each run of samples with no jump or sleep between
// them, the stamps' advance against the local clock's between two of its
// samples (the pair with the tightest bounds, one in its first third, one
// in its last), summed over the runs. It is given once the runs span
// rateMinSpanTTLs and hold rateMinSamples samples.
func measure(samples []clockSample, ttl time.Duration) clockFindings {
	var out clockFindings
	if len(samples) < 2 {
		return out
	}
	pairs := make([]clockPair, len(samples)) // pairs[i]: samples i-1 and i
	var lowers, uppers []float64
	for i := 1; i < len(samples); i++ {
		p := pairOf(&samples[i-1], &samples[i])
		pairs[i] = p
		if !p.broken && p.lo >= ttl/10 {
			lowers = append(lowers, float64(p.d)/float64(p.hi))
			uppers = append(uppers, float64(p.d)/float64(p.lo))
		}
	}
	jumped := make([]bool, len(samples))
	njumps, npairs := 0, 0
	if len(lowers) >= minLongPairs {
		f := (len(lowers) - 1) / 2 // the most pairs that may have jumped
		slices.Sort(lowers)
		slices.Sort(uppers)
		mLo, mHi := lowers[len(lowers)-1-f]-rateSlack, uppers[f]+rateSlack
		if mLo > mHi {
			return out // most long pairs disagree: no judgment
		}
		mMid := (mLo + mHi) / 2
		for i := 1; i < len(samples); i++ {
			p := pairs[i]
			if p.broken {
				continue
			}
			npairs++
			lower := time.Duration(min(mLo*float64(p.lo), mHi*float64(p.lo))) - jumpFloor
			upper := time.Duration(mHi*float64(p.hi)) + jumpFloor
			if p.d >= lower && p.d <= upper {
				continue
			}
			jumped[i] = true
			njumps++
			if !samples[i].reported {
				samples[i].reported = true
				out.jumps = append(out.jumps, ClockCheck{
					Jump:      p.d - time.Duration(mMid*float64(p.lo+p.hi)/2),
					JumpError: (upper - lower) / 2,
				})
			}
		}
	}
	if njumps*4 > npairs {
		return out
	}

	// The runs: samples[start:end] with no broken or jumped pair inside.
	var d, lo, hi, extent time.Duration
	used := 0
	for start := 0; start < len(samples); {
		end := start + 1
		for end < len(samples) && !pairs[end].broken && !jumped[end] {
			end++
		}
		if end-start >= 2 {
			if a, b := runEnds(samples[start:end]); a != nil {
				p := pairOf(a, b)
				d, lo, hi = d+p.d, lo+p.lo, hi+p.hi
				extent += samples[end-1].recv.Sub(samples[start].sent)
				used += end - start
			}
		}
		start = end
	}
	if extent < rateMinSpanTTLs*ttl || used < rateMinSamples || lo <= 0 {
		return out
	}
	out.rate = ClockCheck{
		Rate:     float64(d) / float64(lo+hi) * 2,
		RateLow:  float64(d)/float64(hi) - rateSlack,
		RateHigh: float64(d)/float64(lo) + rateSlack,
		Span:     (lo + hi) / 2,
	}
	return out
}

// runEnds picks the two samples of a run to measure it between: one in
// its first third and one in its last, the pair whose round trips are the
// least part of the span between them; nil if no such pair spans any time.
func runEnds(run []clockSample) (a, b *clockSample) {
	third := max(len(run)/3, 1)
	best := math.Inf(1)
	for i := range third {
		for j := len(run) - third; j < len(run); j++ {
			span := run[j].sent.Sub(run[i].recv)
			if j <= i || span <= 0 {
				continue
			}
			if w := float64(run[i].roundTrip()+run[j].roundTrip()) / float64(span); w < best {
				best, a, b = w, &run[i], &run[j]
			}
		}
	}
	return a, b
}

// Beyond reports whether the rate measured in r surely departs from 1 by
// more than bound (a fraction, as ClockRate): both its bounds lie past
// 1 + bound, or both before 1 − bound. The election warns when a rate is
// Beyond(ClockRate/2) and refuses to lead when it is Beyond(ClockRate); a
// ClockCheck without a rate (Span 0) is never beyond.
func (r ClockCheck) Beyond(bound float64) bool {
	return r.Span > 0 && (r.RateLow > 1+bound || r.RateHigh < 1-bound)
}

// describeRate says how this node's clock runs against the stream
// leader's, with the figures.
func (r ClockCheck) describeRate() string {
	how := "slow"
	if r.Rate < 1 {
		how = "fast"
	}
	return fmt.Sprintf("this node's clock runs %.2f%% %s against the stream leader's: a second of it lasts %.4f s of the server's (between %.4f and %.4f, measured over %v)",
		100*math.Abs(r.Rate-1), how, r.Rate, r.RateLow, r.RateHigh, r.Span.Round(time.Millisecond))
}

// rateError is the error an estimate beyond half of ClockRate gives (nil
// within it), naming the rate.
func (r ClockCheck) rateError() error {
	switch {
	case r.Beyond(ClockRate):
		return fmt.Errorf("%w: %s, beyond the bound of %.0f%%: refusing to lead", ErrClockRate, r.describeRate(), 100*ClockRate)
	case r.Beyond(ClockRate / 2):
		return fmt.Errorf("%w: %s, beyond half the bound of %.0f%%: check the host's clock (NTP) before it reaches the bound, where the node refuses to lead", ErrClockRate, r.describeRate(), 100*ClockRate)
	}
	return nil
}

// checkClocks takes in the stamps of the election's latest writes and
// publishes what they show: a new rate (EventClockRate, and a warning in
// the log beyond half of ClockRate), jumps (EventClockJump). It returns
// the error that keeps this node from leading, matching ErrClockRate, or
// nil. It runs on the campaign goroutine.
func (c *campaigner) checkClocks() error {
	if c.clocks == nil {
		return nil
	}
	w := c.clocks
	now := c.e.now()
	if w.stamped(c.watcher, now, c.e.timing.ttl) {
		found := measure(w.samples, c.e.timing.ttl)
		for _, j := range found.jumps {
			c.reportJump(j)
		}
		w.rate = found.rate
		if found.rate.Span > 0 {
			err := found.rate.rateError()
			if err != nil && (w.warnedAt.IsZero() || now.Sub(w.warnedAt) >= clockWarnEvery) {
				w.warnedAt = now
				c.e.log.Warn("the clock rate is beyond the clock assumption's allowance", "error", err,
					"rate", found.rate.Rate, "rate_low", found.rate.RateLow, "rate_high", found.rate.RateHigh, "span", found.rate.Span.Round(time.Millisecond))
			}
			c.clockRate.Store(math.Float64bits(found.rate.Rate))
			c.emit(Event{Kind: EventClockRate, Clock: found.rate, Err: err})
		}
	}
	if w.rate.Beyond(ClockRate) {
		return w.rate.rateError()
	}
	return nil
}

// reportJump publishes a jump of the stream leader's stamps, a warning
// when it exceeds the offset the deadlines allow for.
func (c *campaigner) reportJump(j ClockCheck) {
	offset := serverOffset(c.e.timing.ttl)
	var err error
	if j.Jump.Abs()-j.JumpError > offset {
		err = fmt.Errorf("%w: the stream leader's stamps jumped by %v (± %v) between two writes of this node: the stream leader changed to one whose clock is that far off the old one's, or its clock stepped; the deadlines allow for %v",
			ErrClockOffset, j.Jump.Round(time.Millisecond), j.JumpError.Round(time.Millisecond), offset)
		c.e.log.Warn("the servers' clocks disagree beyond the clock assumption; keep every server of the bucket on NTP or chrony", "error", err,
			"jump", j.Jump, "jump_error", j.JumpError, "allowed", offset)
	} else {
		c.e.log.Info("the stream leader's stamps jumped between two writes of this node: the stream leader changed, or its clock stepped",
			"jump", j.Jump, "jump_error", j.JumpError, "allowed", offset)
	}
	c.emit(Event{Kind: EventClockJump, Clock: j, Err: err})
}

// slept reports whether the machine slept since the tenure's latest
// acknowledged write was sent (see sleptSince).
func (c *campaigner) slept(t *tenure) bool {
	return sleptSince(c.e.clock, t.slept)
}

// clocksFail ends the tenure t, and reports true, when the clocks can no
// longer vouch for it: the machine slept since its latest acknowledged
// write was sent, or this node's clock runs beyond ClockRate. The release
// that follows is safe either way: a compare-and-set over this node's own
// latest revision, which succeeds only if no other write came since, after
// its work returned.
func (c *campaigner) clocksFail(t *tenure) bool {
	var cause error
	if c.slept(t) {
		cause = sleptCause(c.e.clock, t.slept)
	} else {
		cause = c.checkClocks()
	}
	if cause == nil {
		return false
	}
	c.e.log.Warn("the clocks cannot vouch for the lease; standing down", "error", cause, "revision", t.revision)
	c.standDown(t, cause)
	c.release(t)
	return true
}

// leasePoll is how often the lease watch reads IsLeader.
const leasePoll = 100 * time.Millisecond

// leaseWatch cancels a leadership's context as soon as IsLeader turns false
// before the deadline's own timer fires: after a suspend, which timers do
// not see (they run on the monotonic clock, which stood still), IsLeader
// turns false at once, and the context follows within one poll
// (leasePoll). It then wakes the campaign goroutine, which stands down
// (clocksFail) even between its own timers.
type leaseWatch struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// watchLease starts the lease watch of a leadership whose context cancel
// cancels, if the election's clock can report a suspend; nil otherwise.
func (c *campaigner) watchLease(cancel context.CancelCauseFunc) *leaseWatch {
	if _, ok := c.e.clock.(SuspendReporter); !ok {
		return nil
	}
	every := c.e.clock.Real(leasePoll)
	w := &leaseWatch{}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = time.AfterFunc(every, func() {
		if !c.e.IsLeader() {
			if cause := c.leaseEnded(); cause != nil {
				cancel(cause)
			}
			select {
			case c.clockWake <- struct{}{}:
			default:
			}
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.stopped {
			w.timer.Reset(every)
		}
	})
	return w
}

// stop ends the watch; a nil watch is none.
func (w *leaseWatch) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
}

// leaseEnded is why the lease of the leadership now announced ended, as
// its lease watch or its validity timer finds it: nil once the campaign
// stands down, which cancels with its own cause; else lapsed's.
func (c *campaigner) leaseEnded() error {
	c.e.mu.Lock()
	standing, base := c.e.state == LeaderState, c.e.validSlept
	c.e.mu.Unlock()
	if !standing {
		return nil
	}
	return lapsed(c.e.clock, base, errors.New("its validity ended before a renewal was acknowledged"))
}

// lapsed is the cause of a tenure whose validity deadline passed, on clk,
// since it sent the write the deadline counts from, when clk reported base
// as slept: ErrSuspended if the machine slept since (the deadline passed on
// a clock that stood still: the lease had ended in real time during the
// sleep, whatever else failed), else ErrRenewDeadline, wrapping why.
func lapsed(clk Clock, base time.Duration, why error) error {
	if sleptSince(clk, base) {
		return sleptCause(clk, base)
	}
	return fmt.Errorf("%w: %w", ErrRenewDeadline, why)
}

// sleptCause is ErrSuspended with how long the machine slept since clk
// reported base as slept, when the leader sent its latest acknowledged write.
func sleptCause(clk Clock, base time.Duration) error {
	return fmt.Errorf("%w for %v since the leader sent its latest acknowledged write",
		ErrSuspended, (suspended(clk) - base).Round(time.Millisecond))
}
