package election

import (
	"math"
	"sync"
	"time"
)

// Every KV call the election makes that reaches the server (a claim, a
// renewal, a vouch, a candidate record) is also a measure of the round trip
// to the bucket's stream leader, which across regions or over a leaf link is
// tens to hundreds of milliseconds instead of one. Two timings follow it:
//
//   - the vouch window: after a removal, candidates wait for the old
//     leader's vouch (one watch event and one compare-and-set from its side,
//     about 1.5 of its round trips) before claiming; claiming sooner
//     pre-empts the vouch and costs a TTL of waiting. The window is three of
//     the slowest recent round trips among the key's live candidates (each
//     publishes its own in its record), at least the TTL-derived floor, at
//     most a quarter of the TTL, where waiting would cost about as much as
//     the vouch saves;
//   - a warning when a round trip exceeds a quarter of the renewal window
//     ((TTL − interval)/2, an eighth of the TTL at the default interval):
//     then fewer than four tries of a renewal fit before the validity
//     deadline, and one late acknowledgement ends leadership for nothing.
//     The rule of docs/topologies.md follows: TTL ≥ 32 × the p99 round trip
//     at the default interval.
//
// Round trips never bear on safety: validity counts from when a write was
// sent, and the key's TTL from when the server stored it, later.

// roundTripSamples is how many recent round trips an election keeps.
const roundTripSamples = 16

// roundTripWarnEvery limits the warning to one per this long.
const roundTripWarnEvery = 10 * time.Minute

// roundTrips holds an election's recent round trips to the bucket.
type roundTrips struct {
	mu       sync.Mutex
	samples  [roundTripSamples]time.Duration
	next     int
	warnedAt time.Time
}

// observe records d and reports whether it calls for a warning: it exceeds
// budget and none was given within roundTripWarnEvery.
func (r *roundTrips) observe(d, budget time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples[r.next%roundTripSamples] = d
	r.next++
	if d <= budget || (!r.warnedAt.IsZero() && time.Since(r.warnedAt) < roundTripWarnEvery) {
		return false
	}
	r.warnedAt = time.Now()
	return true
}

// worst returns the slowest of the recent round trips, 0 before any.
func (r *roundTrips) worst() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var w time.Duration
	for _, d := range r.samples {
		w = max(w, d)
	}
	return w
}

// roundTrip records the round trip of a KV call sent at sent that returned
// err, if it reached the server (it succeeded or was refused), and warns
// when it is too long for the TTL.
func (c *campaigner) roundTrip(sent time.Time, err error) {
	if err != nil && !isCASConflict(err) {
		return // a timeout or a broken connection measures nothing
	}
	d := time.Since(sent)
	budget := c.timing.renewRetry
	if c.rtt.observe(d, budget) {
		c.log.Warn("the round trip to the bucket is long for its TTL: fewer than four tries of a renewal fit in the renewal window, so one late acknowledgement can end leadership; use a longer TTL (see docs/topologies.md)",
			"round_trip", d.Round(time.Millisecond), "ttl", c.timing.ttl, "renewal_window", c.timing.validity-c.timing.interval,
			"smallest_ttl", suggestedTTL(d, c.timing))
	}
}

// suggestedTTL is the smallest TTL, in whole seconds and at least MinTTL,
// whose renewal window fits four round trips of d at t's ratio of interval
// to TTL.
func suggestedTTL(d time.Duration, t timing) time.Duration {
	// The window (T − I)/2 scales with T at a fixed ratio I/T.
	window := float64(t.validity-t.interval) / float64(t.ttl)
	seconds := math.Ceil(float64(4*d) / window / float64(time.Second))
	return max(MinTTL, time.Duration(seconds)*time.Second)
}

// vouchWait is how long after a removal candidates wait for the old
// leader's vouch before claiming: see the top of this file.
func (c *campaigner) vouchWait() time.Duration {
	slowest := c.rtt.worst()
	for _, cand := range c.hub.candidates(c.key, c.timing.ttl) {
		slowest = max(slowest, cand.RoundTrip)
	}
	return min(max(c.timing.vouchFloor, 3*slowest), c.timing.ttl/4)
}
