package election

import "time"

// timing holds the durations an election derives from its bucket TTL and
// campaign interval.
//
// The safety argument, with T the TTL and I the interval:
//
//   - A leader counts its validity from the moment it sent its last successful
//     write (claim or renewal), on its monotonic clock, and stands down
//     validity = I + (T−I)/2 after it, even if it cannot reach the server.
//   - The server wrote that revision no earlier than it was sent and never
//     expires it before T has passed, so on normal expiry the old leader has
//     stood down (T−I)/2 before any claim over no entry can succeed: such a
//     winner announces at once, as does one that claimed over the holder's
//     own release or handoff: the holder writes either by compare-and-set
//     over its own latest revision, only after standing down and once its
//     own announce time has passed (so every holder before it had stood
//     down too).
//   - The key can also vanish early (deleted or purged). A winner over a
//     delete or purge marker therefore announces only announceDelay = T after
//     its claim was acknowledged: later than any earlier leader's validity,
//     however early the key vanished. The margin T − validity covers clock
//     rate differences and scheduling delay.
//   - Unless the old leader vouches: a node that sees another client's write
//     over its key while it is the announced leader within its validity
//     stands down and writes a release by compare-and-set over that write,
//     and the next winner announces at once over it (campaigner.vouch says
//     why that is safe). Candidates wait a vouch window after a removal
//     before claiming over it, so that their claims do not pre-empt the
//     vouch: vouchFloor at least, longer when round trips are long
//     (roundtrip.go).
//   - What a leader's work started outside its process must stop by the
//     work deadline, validity + (T−validity)/2 after the last good write
//     (WorkDeadline): still before the key can age out, with the other half
//     of the margin left for clock rates.
//   - A winner that waited out the announce delay announces only once a
//     renewal sent at or after its announce time was acknowledged: a vouch
//     written over its claim meanwhile makes that renewal fail.
type timing struct {
	ttl           time.Duration // bucket TTL
	interval      time.Duration // leader renewal period; the longest wait between a candidate's retries
	validity      time.Duration // leader stands down this long after sending its last good write
	workMargin    time.Duration // the leadership's work must stop this long after its validity deadline (WorkDeadline)
	announceDelay time.Duration // a winner over a delete or purge announces this long after its claim
	vouchFloor    time.Duration // candidates wait at least this long after a removal for the old leader's vouch
	sitOut        time.Duration // a handoff to another keeps this node away, and a resignation or vouch keeps its writer away, this long
	priorityWait  time.Duration // a candidate lets each higher priority among the live candidates claim a free key first for this long
	renewRetry    time.Duration // wait between retries of a failed renewal
	opTimeout     time.Duration // timeout of one KV call
	maxSplay      time.Duration // upper bound of the random start delay

	// absenceProvesExpiry: a claim over no entry proves the last holder's
	// write aged out (see keysOnlyAgeOut); otherwise it counts as a removal.
	absenceProvesExpiry bool
}

// maxOpTimeout caps a single KV call, as jetstream's own default does.
const maxOpTimeout = 5 * time.Second

// maxVouchFloor caps the vouch window's floor, a twentieth of the TTL: long
// enough for the old leader's watcher to deliver the removal and its vouch
// to come back over a few round trips of a region's network, short against
// the TTL a winner waits without one. Longer round trips lengthen the
// window itself (roundtrip.go).
const maxVouchFloor = 250 * time.Millisecond

// maxSplay caps the random start delay: a crowd of candidates starting at
// once spreads its first claims over up to this long.
const maxSplay = 5 * time.Second

// newTiming derives every duration of an election from its bucket's TTL and
// its campaign interval (0: the default, three quarters of the TTL). It is
// the one place each is computed.
func newTiming(ttl, interval time.Duration) timing {
	if interval == 0 {
		interval = ttl * 3 / 4
	}
	validity := interval + (ttl-interval)/2
	return timing{
		ttl:           ttl,
		interval:      interval,
		validity:      validity,
		workMargin:    (ttl - validity) / 2,
		announceDelay: ttl,
		vouchFloor:    min(ttl/20, maxVouchFloor),
		sitOut:        ttl / 2,
		priorityWait:  min(ttl/10, maxPriorityWait),
		renewRetry:    (validity - interval) / 4,
		opTimeout:     min(interval, maxOpTimeout),
		maxSplay:      min(interval, maxSplay),
	}
}

// ExpiryMargin is how long before its key can age out a leader's validity
// deadline comes, on a bucket with the given TTL and with the given campaign
// interval (0: the default): (TTL − interval)/2, an eighth of the TTL at the
// default interval. A leader cut off from the servers stands down when its
// validity ends; whatever its leadership started has this long to stop
// before another candidate can win the key.
func ExpiryMargin(ttl, interval time.Duration) time.Duration {
	t := newTiming(ttl, interval)
	return t.ttl - t.validity
}
