package election

import (
	"math/rand/v2"
	"time"
)

// Backoff chooses how long a candidate waits between campaigns it lost.
// Without one, a candidate campaigns once per campaign interval.
//
// A backoff changes only how often candidates try; it never shortens the
// announce delay that keeps two leaders from overlapping.
type Backoff interface {
	// Duration returns the wait after the n-th consecutive lost campaign,
	// counting from 0. The count starts again after the node has led.
	Duration(n int) time.Duration
}

// minCampaignWait is the shortest wait between two campaigns, whatever a
// Backoff returns, so that a zero or negative duration cannot spin.
const minCampaignWait = 10 * time.Millisecond

// LinearBackoff waits Initial + n·Step after the n-th lost campaign, at most
// Max. For example {Initial: time.Second, Step: time.Second, Max: 5 *
// time.Second} gives 1s, 2s, 3s, 4s, 5s, 5s, …
type LinearBackoff struct {
	Initial time.Duration // wait after the first lost campaign
	Step    time.Duration // added for each further lost campaign
	Max     time.Duration // the longest wait
}

// Duration implements Backoff.
func (b LinearBackoff) Duration(n int) time.Duration {
	if b.Step <= 0 || n <= 0 {
		return min(b.Initial, b.Max)
	}
	steps := (b.Max - b.Initial) / b.Step
	if time.Duration(n) >= steps {
		return b.Max
	}
	return b.Initial + time.Duration(n)*b.Step
}

// ExponentialBackoff doubles the wait after each lost campaign up to Max, and
// picks the actual wait at random in the upper half of that ceiling ("equal
// jitter") so that candidates spread out. For example {Initial: 250 *
// time.Millisecond, Max: 4 * time.Second} gives ceilings 250ms, 500ms, 1s, 2s,
// 4s, 4s, … and waits of 125–250ms, 250–500ms, 0.5–1s, 1–2s, 2–4s, 2–4s, …
type ExponentialBackoff struct {
	Initial time.Duration // ceiling after the first lost campaign
	Max     time.Duration // the largest ceiling
}

// Duration implements Backoff.
func (b ExponentialBackoff) Duration(n int) time.Duration {
	ceiling := b.ceiling(n)
	if ceiling <= 1 {
		return ceiling
	}
	half := ceiling / 2
	return half + rand.N(ceiling-half+1)
}

// ceiling returns min(Initial·2^n, Max) without overflowing.
func (b ExponentialBackoff) ceiling(n int) time.Duration {
	d := b.Initial
	for range max(n, 0) {
		if d >= b.Max/2 {
			return b.Max
		}
		d *= 2
	}
	return min(d, b.Max)
}
