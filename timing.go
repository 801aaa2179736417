package election

import "time"

// The clock assumption every deadline of an election rests on, stated here
// once (docs/design.md, "Clocks", carries the derivation for users):
//
//   - Rates: over any span, a candidate's monotonic clock and any bucket
//     server's wall clock advance by amounts within clockRate of each other:
//     a span a candidate measures as d lasts between d·(1−ρ) and d·(1+ρ) on
//     any server's clock, with ρ = ClockRate (5%). NTP keeps
//     rates within 0.05%; ρ is a hundred times that, and costs a leader at
//     the 2 s TTL floor 95 ms of its margin.
//   - Offsets: the bucket's servers' wall clocks agree within
//     ServerClockOffset (100 ms): the server that stamps a write and the one that ages it out
//     may differ, and a server ahead of the stamper removes keys early by
//     its lead. NTP or chrony keeps them within milliseconds.
//   - Suspend is outside the assumption: a suspended host's monotonic clock
//     stops, so a leader resumed from suspend believes less time has passed
//     than has. Where the election's clock reports suspend (SuspendReporter:
//     the machine's clock on Linux), a tenure the machine slept through
//     ends at once and nothing is written on its strength (sleptSince,
//     clock.go; clockcheck.go); elsewhere suspend goes unseen, and fencing
//     tokens are what protects the resource.
//
// The running election checks the rate and the offsets against what its
// writes' stamps show, and refuses to lead on a clock past ClockRate
// (clockcheck.go).
//
// A span is ρ and an offset absolute; the ρ does not depend on the campaign
// interval. What the interval decides is how much of the margin left inside
// the bound is the leader's to retry a failed renewal.
const (
	clockRateNum = 1
	clockRateDen = 20
)

// ClockRate is the bound on clock rate differences an election's safety
// assumes, as a fraction: 0.05. See the package documentation.
const ClockRate = float64(clockRateNum) / clockRateDen

// ServerClockOffset is the bound on the offsets between the wall clocks of a
// bucket's servers that an election's safety assumes. See the package
// documentation.
const ServerClockOffset = 100 * time.Millisecond

// timing holds the durations an election derives from its bucket TTL, its
// campaign interval and the clock assumption above. With T the TTL and I
// the interval, every one counted from the moment a leader sent its last
// acknowledged write (claim or renewal), on its monotonic clock:
//
//   - hardEnd = (T − offset)/(1+ρ) is the earliest moment, by the leader's
//     clock, at which any server can age the write out: the write is stamped
//     no earlier than it was sent, a server ahead of the stamper by offset
//     starts counting offset early, and its clock runs up to ρ fast. Nothing
//     of the leadership may outlive it. G = hardEnd − I is the margin the
//     interval leaves (MinIntervalGap at least).
//   - validity = I + G/2: the leader stands down, IsLeader turns false and
//     the leadership context is cancelled, even if it cannot reach the
//     server. The half of G before it is the leader's window to retry a
//     failed renewal (renewRetry paces the retries within it). A release,
//     a handoff, a vouch or Once's done mark is written only while it still
//     holds its own latest revision, which cannot have aged out before
//     hardEnd.
//   - workDeadline = I + 7G/8: everything the leadership started must have
//     stopped (WorkDeadline; election run's and agent's guard kills the
//     command then; a fleet daemon returns within WorkMargin after losing
//     its node's validity). The last G/8 before hardEnd is left for a kill
//     to take effect.
//   - announceDelay = outlast(hardEnd): a winner over a delete or purge
//     marker announces this long after its claim was acknowledged, when
//     the previous holder's hardEnd, begun at its last write before the
//     claim, has passed however the two clocks run.
//   - A leader that sees its key removed while its work still runs answers
//     at once with a draining mark naming how long until its write's hardEnd
//     (drain.go); candidates claim over the mark only once outlast of that
//     has passed since they saw it, and announce at once then.
//
// How the rest of the protocol uses them:
//
//   - A claim over no entry announces at once: the key aged out, which no
//     server does before hardEnd of its last holder. So does a claim over a
//     holder's release or handoff: the holder writes either by
//     compare-and-set over its own latest revision, only after standing down
//     and once its own announce time has passed (so every holder before it
//     had stood down too).
//   - Unless the old leader vouches: a node that sees another client's write
//     over its key while it is the announced leader within its validity
//     stands down and writes a release by compare-and-set over that write,
//     and the next winner announces at once over it (campaigner.vouch says
//     why that is safe). Candidates wait a vouch window after a removal
//     before claiming over it, so that their claims do not pre-empt the
//     vouch: vouchFloor at least, longer when round trips are long
//     (roundtrip.go).
//   - A winner that waited out the announce delay announces only once a
//     renewal sent at or after its announce time was acknowledged: a vouch
//     written over its claim meanwhile makes that renewal fail.
type timing struct {
	ttl           time.Duration // bucket TTL
	interval      time.Duration // leader renewal period; the longest wait between a candidate's retries
	hardEnd       time.Duration // the earliest a server can age out a leader's last write, after the leader sent it
	validity      time.Duration // leader stands down this long after sending its last good write
	workDeadline  time.Duration // the leadership's work must have stopped this long after its last good write (WorkDeadline)
	announceDelay time.Duration // a winner over a delete or purge announces this long after its claim
	vouchFloor    time.Duration // candidates wait at least this long after a removal for the old leader's vouch
	drainGrace    time.Duration // a leader that saw its key removed marks it draining unless its work returned within this long
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

// hardEnd is the earliest moment, after a leader sent a write, at which a
// server can age it out under the clock assumption: (TTL − offset)/(1+ρ).
// The offset is ServerClockOffset, or a twentieth of the TTL if that is less (for
// the test TTLs WithUnsafeShortTTL allows).
func hardEnd(ttl time.Duration) time.Duration {
	return (ttl - serverOffset(ttl)) * clockRateDen / (clockRateDen + clockRateNum)
}

// serverOffset is the offset between the bucket's servers' clocks that the
// deadlines of an election at the given TTL allow for: ServerClockOffset,
// or a twentieth of the TTL if that is less.
func serverOffset(ttl time.Duration) time.Duration {
	return min(ServerClockOffset, ttl/20)
}

// outlast is how long a candidate waits, on its own clock, to be sure that
// a span another candidate measures as d on its clock, begun no later, has
// ended: d·(1+ρ)/(1−ρ), rounded up. The other's d lasts at most d·(1+ρ) on
// a server's clock, and the wait at least that long.
func outlast(d time.Duration) time.Duration {
	const den = clockRateDen - clockRateNum
	return (d*(clockRateDen+clockRateNum) + den - 1) / den
}

// newTiming derives every duration of an election from its bucket's TTL and
// its campaign interval (resolved: defaultInterval). It is the one place
// each is computed.
func newTiming(ttl, interval time.Duration) timing {
	end := hardEnd(ttl)
	gap := end - interval
	validity := interval + gap/2
	return timing{
		ttl:           ttl,
		interval:      interval,
		hardEnd:       end,
		validity:      validity,
		workDeadline:  interval + gap*7/8,
		announceDelay: outlast(end),
		vouchFloor:    min(ttl/20, maxVouchFloor),
		drainGrace:    min(ttl/20, maxVouchFloor) / 4,
		sitOut:        ttl / 2,
		priorityWait:  min(ttl/10, maxPriorityWait),
		renewRetry:    (validity - interval) / 4,
		opTimeout:     min(interval, maxOpTimeout),
		maxSplay:      min(interval, maxSplay),
	}
}

// Timing is what an election derives from its bucket TTL and campaign
// interval under the clock assumption (see the package documentation):
// each deadline is counted on the leader's monotonic clock from the moment
// it sent its last acknowledged write, and the announce delay on the
// winner's from the acknowledgement of its claim.
type Timing struct {
	TTL      time.Duration // the bucket's TTL
	Interval time.Duration // the campaign interval: a leader renews this often
	// Validity is when the leader stands down unless a renewal was
	// acknowledged meanwhile: IsLeader turns false and the leadership
	// context is cancelled.
	Validity time.Duration
	// WorkDeadline is when everything the leadership started must have
	// stopped (the function WorkDeadline gives it as a moment).
	WorkDeadline time.Duration
	// EarliestExpiry is the earliest moment any server can age the write
	// out: (TTL − ServerClockOffset)/(1 + ClockRate).
	EarliestExpiry time.Duration
	// AnnounceDelay is how long a winner over a deleted or purged key waits
	// before it leads, when the old leader does not vouch.
	AnnounceDelay time.Duration
}

// TimingFor returns the timing of an election on a bucket with the given
// TTL and with the given campaign interval (0: the default, three quarters
// of the TTL). It does not check the limits; NewElection does.
func TimingFor(ttl, interval time.Duration) Timing {
	if interval == 0 {
		interval = defaultInterval(ttl)
	}
	t := newTiming(ttl, interval)
	return Timing{TTL: t.ttl, Interval: t.interval, Validity: t.validity, WorkDeadline: t.workDeadline, EarliestExpiry: t.hardEnd, AnnounceDelay: t.announceDelay}
}

// WorkMargin is how long a leader's work has to stop after its leadership
// context is cancelled at the validity deadline: WorkDeadline − Validity.
// It is 116 ms at a 2 s TTL with the default interval, 723 ms at 10 s,
// 4.5 s at a minute.
func (t Timing) WorkMargin() time.Duration { return t.WorkDeadline - t.Validity }
