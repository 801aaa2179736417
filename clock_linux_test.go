package election

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestTheMachineClockReportsTheBootOffsetSteadily: on a machine that does
// not sleep during the test, the machine clock's report of time slept is
// CLOCK_BOOTTIME less CLOCK_MONOTONIC, and it holds still across many
// readings (within the noise the suspend rule ignores), so that an awake
// leader never stands down for a suspend.
func TestTheMachineClockReportsTheBootOffsetSteadily(t *testing.T) {
	t.Parallel()
	var clk Clock = machineClock{}
	r, ok := clk.(SuspendReporter)
	if !ok {
		t.Fatal("the machine clock reports no suspend on Linux")
	}
	first := r.Suspended()
	var mono, boot unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		t.Fatal(err)
	}
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
		t.Fatal(err)
	}
	if offset := time.Duration(boot.Nano() - mono.Nano()); (offset - first).Abs() > suspendNoise {
		t.Errorf("reports %v slept; CLOCK_BOOTTIME − CLOCK_MONOTONIC is %v", first, offset)
	}
	lowest, highest := first, first
	for i := range 10000 {
		s := r.Suspended()
		if s < highest {
			t.Fatalf("reading %d: %v, less than an earlier %v", i, s, highest)
		}
		lowest, highest = min(lowest, s), max(highest, s)
	}
	if highest-lowest > suspendNoise {
		t.Errorf("the reports spread over %v with the machine awake, more than the noise allowed, %v", highest-lowest, suspendNoise)
	}
	t.Logf("slept since boot: %v; spread over 10000 readings: %v", first, highest-lowest)
}
