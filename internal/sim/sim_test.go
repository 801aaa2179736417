package sim

import (
	"testing"
	"time"
)

// TestSeeds runs a small fixed range of seeds: every check must hold.
func TestSeeds(t *testing.T) {
	sum := Run(t, Config{First: 1, Seeds: 4, Length: 10 * time.Minute, Parallel: 2})
	for _, res := range sum.failed {
		Report(&testWriter{t}, res)
	}
	t.Logf("%d seeds, %.2f simulated hours, faults %v, %d violations, %.1f s", sum.Seeds, sum.SimulatedHours, sum.Faults, sum.Violations, sum.WallSeconds)
	if sum.Violations > 0 {
		t.Errorf("%d violations in seeds %v", sum.Violations, sum.FailedSeeds)
	}
}

type testWriter struct{ t testing.TB }

func (w *testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
