package history

import (
	"time"

	"golang.org/x/sys/unix"
)

// machineSuspended returns how long the machine has been suspended since
// it booted: CLOCK_BOOTTIME, which counts suspend, less CLOCK_MONOTONIC,
// which Go's monotonic clock reads and which does not. Of three readings,
// each bracketed by two monotonic ones, the one with the narrowest bracket
// is kept; 0 if the clocks cannot be read.
func machineSuspended() time.Duration {
	best, bestGap := time.Duration(0), time.Duration(-1)
	for range 3 {
		var m1, b, m2 unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &m1) != nil ||
			unix.ClockGettime(unix.CLOCK_BOOTTIME, &b) != nil ||
			unix.ClockGettime(unix.CLOCK_MONOTONIC, &m2) != nil {
			break
		}
		gap := time.Duration(m2.Nano() - m1.Nano())
		if bestGap < 0 || gap < bestGap {
			best, bestGap = time.Duration(b.Nano()-m1.Nano())-gap/2, gap
		}
	}
	return max(best, 0)
}
