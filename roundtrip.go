package election

import (
	"slices"
	"sync"
	"time"
)

// Every KV call the election makes that reaches the server (a claim, a
// renewal, a vouch, a candidate record) is also a measure of the round trip
// to the bucket's stream leader, which across regions or over a leaf link is
// tens to hundreds of milliseconds instead of one. The election keeps the
// median of its last 16: a steady distance shows in it, a fault's spike
// does not. Two timings follow it:
//
//   - the vouch window: after a removal, candidates wait for the old
//     leader's vouch (one watch event and one compare-and-set from its side,
//     about 1.5 of its round trips) before claiming; claiming sooner
//     pre-empts the vouch and costs a TTL of waiting. The window is three of
//     the longest round trip among the key's live candidates (each
//     publishes its own in its record), at least the TTL-derived floor, at
//     most a quarter of the TTL, where waiting would cost about as much as
//     the vouch saves; a removal with no vouch to come (the leader cut off)
//     costs the window on top of the TTL;
//   - a warning when the round trip exceeds a quarter of the renewal window
//     (from the interval to the validity deadline: timing.go; a tenth of
//     the TTL less 48 ms at the default interval): then fewer than four
//     tries of a renewal fit before the validity deadline, and one late
//     acknowledgement ends leadership for nothing. The rule of
//     docs/topologies.md follows: TTL ≥ 40 × the round trip + 0.5 s at the
//     default interval.
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
	samples  []time.Duration // the latest, oldest first
	warnedAt time.Time
}

// add records d, measured at now, and reports whether the round trip
// now calls for a warning: it exceeds budget and none was given within
// roundTripWarnEvery.
func (r *roundTrips) add(d, budget time.Duration, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) == roundTripSamples {
		r.samples = r.samples[1:]
	}
	r.samples = append(r.samples, d)
	if r.medianLocked() <= budget || (!r.warnedAt.IsZero() && now.Sub(r.warnedAt) < roundTripWarnEvery) {
		return false
	}
	r.warnedAt = now
	return true
}

// median returns the median of the recent round trips, 0 before any.
func (r *roundTrips) median() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.medianLocked()
}

func (r *roundTrips) medianLocked() time.Duration {
	if len(r.samples) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(r.samples))
	return sorted[len(sorted)/2]
}

// roundTrip records the round trip of a KV call sent at sent that returned
// err, if it reached the server (it succeeded or was refused), and warns
// when the round trip is too long for the TTL.
func (c *campaigner) roundTrip(sent time.Time, err error) {
	if err != nil && !isCASConflict(err) {
		return // a timeout or a broken connection measures nothing
	}
	now := c.e.clock.Now()
	if c.rtt.add(now.Sub(sent), c.e.timing.renewRetry, now) {
		rtt := c.rtt.median()
		c.e.log.Warn("the round trip to the bucket is long for its TTL: fewer than four tries of a renewal fit in the renewal window, so one late acknowledgement can end leadership; use a longer TTL (see docs/topologies.md)",
			"round_trip", rtt.Round(time.Millisecond), "ttl", c.e.timing.ttl, "renewal_window", c.e.timing.validity-c.e.timing.interval,
			"smallest_ttl", suggestedTTL(rtt, c.e.timing))
	}
}

// suggestedTTL is the smallest TTL, in whole seconds and at least MinTTL,
// whose renewal window fits four round trips of d at t's ratio of interval
// to TTL; MaxTTL if none does.
func suggestedTTL(d time.Duration, t timing) time.Duration {
	for ttl := MinTTL; ttl < MaxTTL; ttl += time.Second {
		interval := time.Duration(float64(ttl) * float64(t.interval) / float64(t.ttl))
		if w := newTiming(ttl, interval); w.validity-w.interval >= 4*d {
			return ttl
		}
	}
	return MaxTTL
}

// vouchWait is how long after a removal candidates wait for the old
// leader's vouch before claiming: see the top of this file.
func (c *campaigner) vouchWait() time.Duration {
	longest := c.rtt.median()
	for _, cand := range c.watcher.candidates(c.e.key, c.e.timing.ttl) {
		longest = max(longest, cand.RoundTrip)
	}
	return min(max(c.e.timing.vouchFloor, 3*longest), c.e.timing.ttl/4)
}
