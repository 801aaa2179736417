package sim

import (
	"slices"
	"testing"
	"time"
)

// TestASeedReplays runs one seed twice: the same schedule, the same
// violations (none) and the same timeline of decisions, to the
// nanosecond of simulated time. The seed's minute, at TTL 2.26 s, has
// seven faults and requests (purges, every connection dropped, lost
// answers, a resignation, a late renewal after a removal) and Once jobs
// recording their runs. Replaying a failing seed is
// go run ./cmd/chaos -simulate -seed N.
func TestASeedReplays(t *testing.T) {
	const seed, length = 31, time.Minute
	a := RunSeed(t, seed, length)
	b := RunSeed(t, seed, length)
	if a.Schedule.String() != b.Schedule.String() {
		t.Fatalf("two schedules for seed %d:\n%v\n%v", seed, a.Schedule, b.Schedule)
	}
	if len(a.Schedule.Faults) < 5 {
		t.Errorf("the seed has %d faults; the test wants a seed with several", len(a.Schedule.Faults))
	}
	if len(a.Violations) > 0 || len(b.Violations) > 0 {
		t.Errorf("violations: %v, then %v", a.Violations, b.Violations)
	}
	if len(a.Timeline) < 10 {
		t.Errorf("%d decisions; the test wants a run with several", len(a.Timeline))
	}
	if a.Digest != b.Digest {
		i := 0
		for i < min(len(a.Timeline), len(b.Timeline)) && a.Timeline[i] == b.Timeline[i] {
			i++
		}
		t.Errorf("two timelines (digests %s and %s) of %d and %d decisions; the first %d agree, then:\n  %v\n  %v",
			a.Digest, b.Digest, len(a.Timeline), len(b.Timeline), i, at(a.Timeline, i), at(b.Timeline, i))
	}
	if !slices.Equal(a.Timeline, b.Timeline) && a.Digest == b.Digest {
		t.Error("the digest hides a difference")
	}
}

func at(ds []Decision, i int) any {
	if i < len(ds) {
		return ds[i]
	}
	return "(none)"
}
