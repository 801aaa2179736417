package election_test

import (
	"testing"
	"time"

	"github.com/kvelect/election"
)

func TestLinearBackoff(t *testing.T) {
	t.Parallel()
	b := election.LinearBackoff{Initial: time.Second, Step: time.Second, Max: 5 * time.Second}
	want := []time.Duration{1, 2, 3, 4, 5, 5, 5}
	for n, w := range want {
		if got := b.Duration(n); got != w*time.Second {
			t.Errorf("Duration(%d) = %v, want %v", n, got, w*time.Second)
		}
	}
	if got := b.Duration(1 << 40); got != 5*time.Second {
		t.Errorf("Duration(huge) = %v, want the maximum", got)
	}

	uneven := election.LinearBackoff{Initial: time.Second, Step: 2 * time.Second, Max: 6 * time.Second}
	for n, w := range []time.Duration{1, 3, 5, 6, 6} {
		if got := uneven.Duration(n); got != w*time.Second {
			t.Errorf("%+v: Duration(%d) = %v, want %v", uneven, n, got, w*time.Second)
		}
	}
	uncapped := election.LinearBackoff{Initial: time.Second, Step: time.Second}
	if got := uncapped.Duration(9); got != 10*time.Second {
		t.Errorf("without Max: Duration(9) = %v, want 10s", got)
	}
}

func TestExponentialBackoff(t *testing.T) {
	t.Parallel()
	b := election.ExponentialBackoff{Initial: 250 * time.Millisecond, Max: 4 * time.Second}
	ceilings := []time.Duration{250, 500, 1000, 2000, 4000, 4000, 4000}
	for n, c := range ceilings {
		c *= time.Millisecond
		for range 100 {
			if got := b.Duration(n); got < c/2 || got > c {
				t.Fatalf("Duration(%d) = %v, want within [%v, %v]", n, got, c/2, c)
			}
		}
	}
	if got := b.Duration(1 << 40); got < 2*time.Second || got > 4*time.Second {
		t.Errorf("Duration(huge) = %v, want within [2s, 4s]", got)
	}

	uncapped := election.ExponentialBackoff{Initial: time.Second}
	if got := uncapped.Duration(3); got < 4*time.Second || got > 8*time.Second {
		t.Errorf("without Max: Duration(3) = %v, want within [4s, 8s]", got)
	}
	if got := uncapped.Duration(1 << 40); got < election.MaxTTL/2 || got > election.MaxTTL {
		t.Errorf("without Max: Duration(huge) = %v, want at most MaxTTL", got)
	}
}
