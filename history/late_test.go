package history

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election"
)

// TestHappenedIsTheValidityDeadline: a stand-down noticed after the
// leadership's validity ended is dated to that end, counted from the last
// renewal acknowledged in time (or the win), at the bucket's TTL and the
// campaign interval; one noticed before it keeps its own time.
func TestHappenedIsTheValidityDeadline(t *testing.T) {
	const ttl, interval = 2 * time.Second, 1500 * time.Millisecond
	validity := election.TimingFor(ttl, interval).Validity
	h := &History{ttl: ttl} // the TTL read already
	won := time.Now()
	renewed := func(sent, acked time.Duration) *renewal {
		return &renewal{sent: won.Add(sent), acked: won.Add(acked)}
	}
	for _, tc := range []struct {
		name    string
		tenure  *tenure
		noticed time.Duration // after the win
		want    time.Duration // after the win
	}{
		{"no leadership known", nil, 30 * time.Second, 30 * time.Second},
		{"within the interval", &tenure{base: won, interval: interval}, time.Second, time.Second},
		{"before the deadline, past the interval", &tenure{base: won, interval: interval}, validity - time.Millisecond, validity - time.Millisecond},
		{"paused past the win's deadline", &tenure{base: won, interval: interval}, 20 * time.Second, validity},
		{"paused past a renewal's deadline", &tenure{base: won, renewal: renewed(1499*time.Millisecond, 1500*time.Millisecond), interval: interval},
			20 * time.Second, 1499*time.Millisecond + validity},
		{"a renewal acknowledged after the deadline", &tenure{base: won, renewal: renewed(1500*time.Millisecond, validity+time.Millisecond), interval: interval},
			validity + 2*time.Millisecond, validity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pending{at: won.Add(tc.noticed), tenure: tc.tenure}
			if got := p.happened(context.Background(), h).Sub(won); got != tc.want {
				t.Errorf("happened %v after the win, want %v", got, tc.want)
			}
		})
	}
}
