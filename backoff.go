package election

import (
	"math/rand/v2"
	"time"
)

// Backoff chooses how long a candidate waits after a lost claim before it
// claims again without news from its watcher (a key that ages out leaves no
// news). Without one, the wait is 50 ms for eight claims in a row (a key that
// aged out can outlive its TTL by the server's expiry lag), then doubles up
// to the campaign interval.
//
// A backoff changes only how often candidates try; it never shortens the
// announce delay that keeps two leaders from overlapping.
type Backoff interface {
	// Duration returns the wait after the n-th consecutive lost campaign,
	// counting from 0. The count starts again whenever the node wins the key.
	Duration(n int) time.Duration
}

// minCampaignWait is the shortest wait between two campaigns, whatever a
// Backoff returns, so that a zero or negative duration cannot spin.
const minCampaignWait = 10 * time.Millisecond

// maxBackoff caps a backoff whose Max is 0: a candidate waiting longer than a
// key can live would only miss elections.
const maxBackoff = MaxTTL

// LinearBackoff waits Initial + n·Step after the n-th lost campaign, at most
// Max (no cap when Max is 0). For example {Initial: time.Second, Step:
// time.Second, Max: 5 * time.Second} gives 1s, 2s, 3s, 4s, 5s, 5s, …
type LinearBackoff struct {
	Initial time.Duration // wait after the first lost campaign
	Step    time.Duration // added for each further lost campaign
	Max     time.Duration // the longest wait; 0 for none
}

// Duration implements Backoff.
func (b LinearBackoff) Duration(n int) time.Duration {
	limit := b.Max
	if limit <= 0 {
		limit = maxBackoff
	}
	if n <= 0 || b.Step <= 0 {
		return min(b.Initial, limit)
	}
	if time.Duration(n) > (limit-b.Initial)/b.Step {
		return limit
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
	Max     time.Duration // the largest ceiling; 0 for MaxTTL
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
	limit := b.Max
	if limit <= 0 {
		limit = maxBackoff
	}
	d := b.Initial
	for range max(n, 0) {
		if d >= limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}
