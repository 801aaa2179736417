package fleet

import (
	"testing"
	"time"

	"github.com/kvelect/election"
)

// TestLossMarginEndsBeforeTheKeyCanAgeOut: over TTLs from MinTTL to
// MaxTTL, a daemon that returns LossMargin after its node's validity
// deadline (when a lost daemon's context is cancelled) has returned by the
// election's work deadline, which comes before the earliest moment any
// server can age the node's write out under the clock assumption, so no
// other node can start the daemon while it runs. A margin of TTL/8, the
// rule before the clock assumption was stated, fails it.
func TestLossMarginEndsBeforeTheKeyCanAgeOut(t *testing.T) {
	t.Parallel()
	for ttl := election.MinTTL; ttl <= election.MaxTTL; ttl += ttl / 4 {
		tm := election.TimingFor(ttl, 0)
		m := LossMargin(ttl)
		if m <= 0 {
			t.Fatalf("TTL %v: LossMargin %v, want above 0", ttl, m)
		}
		if back := tm.Validity + m; back > tm.WorkDeadline {
			t.Errorf("TTL %v: a daemon returning LossMargin %v after validity %v returns at %v, past the work deadline %v", ttl, m, tm.Validity, back, tm.WorkDeadline)
		}
		if tm.WorkDeadline >= tm.EarliestExpiry {
			t.Errorf("TTL %v: work deadline %v not before the earliest expiry %v", ttl, tm.WorkDeadline, tm.EarliestExpiry)
		}
	}
	if got, want := LossMargin(10*time.Second).Round(time.Millisecond), 723*time.Millisecond; got != want {
		t.Errorf("LossMargin(10s) = %v, want %v as the docs say", got, want)
	}
}
