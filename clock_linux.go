package election

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// lastSuspended is the machine clock's latest report of time slept: the
// clock reports no less (SuspendReporter's promise) when a reading is
// noisy or fails.
var lastSuspended atomic.Int64

// maxReadGap is the longest gap between the two CLOCK_MONOTONIC readings
// around a CLOCK_BOOTTIME reading that still counts: the offset read is off
// by at most half of it.
const maxReadGap = 100 * time.Microsecond

// Suspended returns how long the machine has been suspended since it
// booted: CLOCK_BOOTTIME, which counts suspend, less CLOCK_MONOTONIC, which
// Go's monotonic clock reads and which does not. The two differ by a
// constant the kernel moves only on resume, so the reading is off only by
// the time between the reads: the best of three, each bracketed by two
// monotonic readings, is kept, and a reading whose bracket is wider than
// maxReadGap (the thread was preempted) is not.
func (machineClock) Suspended() time.Duration {
	best, bestGap := time.Duration(0), maxReadGap+1
	for range 3 {
		var m1, b, m2 unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &m1) != nil ||
			unix.ClockGettime(unix.CLOCK_BOOTTIME, &b) != nil ||
			unix.ClockGettime(unix.CLOCK_MONOTONIC, &m2) != nil {
			break
		}
		gap := time.Duration(m2.Nano() - m1.Nano())
		if gap < bestGap {
			best, bestGap = time.Duration(b.Nano()-m1.Nano())-gap/2, gap
		}
		if gap < maxReadGap/10 {
			break
		}
	}
	for {
		last := lastSuspended.Load()
		if bestGap > maxReadGap || int64(best) <= last {
			return time.Duration(last)
		}
		if lastSuspended.CompareAndSwap(last, int64(best)) {
			return best
		}
	}
}
