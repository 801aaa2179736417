package election

import (
	"context"
	"time"
)

// Clock is an election's view of time: every reading of the time, timer and
// sleep of its campaign and of its watcher goes through one. Elections read
// the machine's monotonic clock unless WithClock gives them another.
type Clock interface {
	// Now reads the clock.
	Now() time.Time
	// Real converts a span of this clock into the real time a timer must
	// wait for it to pass: d itself for a clock that runs at the real rate,
	// d/rate for one that runs at rate times it.
	Real(d time.Duration) time.Duration
}

// SuspendReporter is implemented by a Clock that can tell how long the
// machine slept without the clock's Now advancing: a suspend. An election
// whose clock implements it checks, before every decision that trusts its
// lease (IsLeader, a renewal, a vouch, announcing), that the machine did
// not sleep since it sent its latest acknowledged write; if it did, its
// validity deadline, counted on a clock that stood still, proves nothing,
// and it stands down at once (ErrSuspended). The machine's clock
// implements it on Linux, where the monotonic clock stops during a
// suspend: it reads CLOCK_BOOTTIME, which counts suspend, less
// CLOCK_MONOTONIC. Elsewhere it does not, and a suspend goes unseen (see
// the package documentation). A Clock given to WithClock that does not
// implement it reports no suspend.
type SuspendReporter interface {
	// Suspended returns how long the machine has been suspended, in total
	// since an origin fixed for the clock, while Now did not advance. It
	// never decreases.
	Suspended() time.Duration
}

// machineClock is the machine's monotonic clock, as package time reads it.
// On Linux it is also a SuspendReporter (clock_linux.go).
type machineClock struct{}

func (machineClock) Now() time.Time                     { return time.Now() }
func (machineClock) Real(d time.Duration) time.Duration { return d }

// WithClock makes an election read c instead of the machine's monotonic
// clock, for every reading of the time, timer and sleep of its campaign and
// watcher. It is for tests of code that runs elections under skewed or
// simulated clocks (as client-go's leader election takes a Clock): a
// candidate whose clock runs fast or slow against the servers', jumps, or
// stands still while its machine is suspended. Production code leaves it
// unset; the safety of an election rests on the clock assumption (see the
// package documentation), which a clock given here may break on purpose.
// Elections made from a Bucket share its watcher, and so its clock: give
// WithClock to OpenBucket, not to Bucket.NewElection.
func WithClock(c Clock) Option {
	return func(o *options) { o.clock = c }
}

// Suspended returns how long the machine has been suspended, in total, as
// the clock of the election whose leadership context (or a context derived
// from it) ctx is reports it, or the machine's clock for any other context:
// on Linux, CLOCK_BOOTTIME less CLOCK_MONOTONIC; 0 where the clock cannot
// tell. Go's timers do not count a suspend, so a process that outlives a
// leadership's lease (a supervisor draining its work, a history dating its
// end) reads it to learn that time passed while its timers stood still:
// SleptSince says whether the machine slept since an earlier reading.
func Suspended(ctx context.Context) time.Duration {
	return suspended(clockOf(ctx))
}

// SleptSince reports whether the machine slept since Suspended(ctx) read
// base, beyond the noise of reading two clocks.
func SleptSince(ctx context.Context, base time.Duration) bool {
	return sleptSince(clockOf(ctx), base)
}

// clockOf is the clock of the election whose leadership context ctx is,
// else the machine's.
func clockOf(ctx context.Context) Clock {
	if ref, ok := ctx.Value(leadershipKey{}).(leadershipRef); ok {
		return ref.e.clock
	}
	return machineClock{}
}

// suspended returns what clk reports as slept (SuspendReporter), 0 if it
// cannot tell.
func suspended(clk Clock) time.Duration {
	if r, ok := clk.(SuspendReporter); ok {
		return r.Suspended()
	}
	return 0
}

// suspendNoise is how much more than the clock reports as slept at base a
// later report must show before the machine counts as having slept since:
// the machine's clock reads two clocks a few microseconds apart, and no
// suspend is shorter than this.
const suspendNoise = time.Millisecond

// sleptSince reports whether clk shows the machine slept since it
// reported base (suspended). This is the suspend rule, stated once: a
// span on an election's clock that the machine slept through measures
// less than passed, so no deadline counted over it holds.
func sleptSince(clk Clock, base time.Duration) bool {
	return suspended(clk)-base > suspendNoise
}

// untilOn is the real time until clk reads at.
func untilOn(clk Clock, at time.Time) time.Duration {
	return clk.Real(at.Sub(clk.Now()))
}
