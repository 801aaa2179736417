package sim

import (
	"fmt"
	"io"
	"testing"
)

// Shrink looks for the fewest faults of a failing schedule s that still
// fail the check that s failed first (res, its run): it tries dropping
// chunks of the kept faults, from halves down to single faults (as delta
// debugging does), keeping each drop whose run still fails that check, and
// goes round again while a round dropped something; each drop kept is
// written to log. A seed's timeline can part between runs
// (docs/simulation.md), so a try that passes by chance keeps a fault that
// was not needed. It returns the smallest schedule found, which failed its
// last run, and that run.
func Shrink(t *testing.T, s Schedule, res Result, log io.Writer) (Schedule, Result) {
	if len(res.Violations) == 0 {
		return s, res
	}
	check := res.Violations[0].Check
	full := s
	if s.Kept == nil {
		s = full.Only(indices(len(full.Faults)))
	}
	fails := func(keep []int) (Schedule, Result, bool) {
		try := full.Only(keep)
		var r Result
		t.Run(fmt.Sprintf("%d-%d-faults", try.Seed, len(keep)), func(t *testing.T) { r = runSchedule(t, try) })
		for _, v := range r.Violations {
			if v.Check == check {
				return try, r, true
			}
		}
		return try, r, false
	}
	tries := 0
	for changed := true; changed; {
		changed = false
		for size := max(len(s.Kept)/2, 1); size >= 1; size /= 2 {
			for start := 0; start < len(s.Kept); {
				end := min(start+size, len(s.Kept))
				keep := append(append([]int(nil), s.Kept[:start]...), s.Kept[end:]...)
				tries++
				if try, r, ok := fails(keep); ok {
					fmt.Fprintf(log, "shrink: %d faults still fail %q (try %d)\n", len(keep), check, tries)
					s, res, changed = try, r, true
					continue // the same start now names the next chunk
				}
				start = end
			}
			if size == 1 {
				break
			}
		}
	}
	return s, res
}

func indices(n int) []int {
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	return xs
}
