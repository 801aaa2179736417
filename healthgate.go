package election

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kvelect/election/internal/healthloop"
)

// Health-gated leadership (WithHealthCheck): the app's own check decides
// whether this node may lead. A goroutine of the election's runs the check
// every interval; the campaign goroutine reads its verdict before every
// claim, and a leader reads it as soon as it changes.

// WithHealthCheck makes leadership depend on the app's health. The election
// calls check every interval, from a goroutine of its own, with a context
// that ends after interval (a check that has not returned by then failed);
// check returns nil when the app can do the leader's work (its database
// answers, its queue is reachable) and an error saying why not otherwise.
//
//   - A candidate claims the key only while its latest check passed. It
//     waits for its first check before its first claim, and campaigns again
//     as soon as a check passes.
//   - A leader whose check failed failures times in a row stands down, with
//     a cause matching ErrHealthCheck (OnLost, EventLost, the leadership
//     history), and once OnWon has returned releases the key, over which
//     another candidate claims and leads at once, as after Bucket.Resign. It
//     hands over within interval × failures of its first failing check, plus
//     the time its work takes to stop.
//   - A failing candidate's record says so (Candidate.Unhealthy): higher
//     priorities that fail do not hold back lower ones, a leader preferring
//     higher priorities does not hand over to a failing one, and
//     Bucket.Resign and Bucket.Transfer do not hand over to one.
//   - Each change of verdict is an EventHealth.
//
// interval must be at least MinHealthInterval and failures at least 1.
// Health gating is about usefulness, not safety: a leader whose check hangs
// still stands down by its validity deadline if it cannot renew, and one
// that passes its check is no more a leader for it.
func WithHealthCheck(check func(ctx context.Context) error, interval time.Duration, failures int) Option {
	return func(o *options) {
		o.health = &healthConfig{check: check, interval: interval, failures: failures}
	}
}

// MinHealthInterval is the shortest interval WithHealthCheck accepts: a
// check is an app's round trip to what it depends on, and one more often
// than this measures the app's scheduler more than its health.
const MinHealthInterval = 10 * time.Millisecond

// healthConfig is what WithHealthCheck set.
type healthConfig struct {
	check    func(ctx context.Context) error
	interval time.Duration
	failures int
}

// checkHealthConfig says what is wrong with h (nil: no health check).
func checkHealthConfig(h *healthConfig) error {
	switch {
	case h == nil:
		return nil
	case h.check == nil:
		return fmt.Errorf("%w: WithHealthCheck with a nil check", ErrInvalidArgument)
	case h.interval < MinHealthInterval:
		return fmt.Errorf("%w: WithHealthCheck interval %v, want at least %v", ErrInvalidArgument, h.interval, MinHealthInterval)
	case h.failures < 1:
		return fmt.Errorf("%w: WithHealthCheck failures %d, want at least 1 (how many failed checks in a row make a leader stand down)", ErrInvalidArgument, h.failures)
	}
	return nil
}

// maxUnhealthyText bounds the check's error as a candidate record carries
// it: the record is rewritten every third of a TTL.
const maxUnhealthyText = 256

// firstCheckPending is what a candidate record says while the first check
// has not returned: the candidate claims nothing yet.
const firstCheckPending = "its first health check has not returned yet"

// healthGate runs the health check and keeps its verdict.
type healthGate struct {
	cfg   healthConfig
	clock Clock

	mu sync.Mutex
	v  healthVerdict

	first chan struct{} // closed when the first check returns
	wake  chan struct{} // buffered 1: the verdict changed, or the streak grew
}

// healthVerdict is what the checks found so far.
type healthVerdict struct {
	checked bool          // a check returned
	passing bool          // the latest check passed
	streak  int           // failed checks in a row
	last    error         // the latest failed check's error, while failing
	took    time.Duration // how long the latest check took
}

func newHealthGate(cfg healthConfig, clock Clock) *healthGate {
	return &healthGate{cfg: cfg, clock: clock, first: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// run calls the check every interval until ctx is done, by the rules of
// healthloop.Run, on the election's clock.
func (g *healthGate) run(ctx context.Context, republish chan<- struct{}) {
	healthloop.Run(ctx, loopClock{g.clock}, g.cfg.interval, g.cfg.check, func(err error, took time.Duration) {
		g.publish(g.note(err, took), republish)
	})
}

// loopClock is the election's clock as healthloop reads it.
type loopClock struct{ Clock }

func (c loopClock) Until(t time.Time) time.Duration { return untilOn(c.Clock, t) }

// publish wakes the campaigner, and the candidate record's writer too if
// the verdict changed (the record says whether the check fails).
func (g *healthGate) publish(changed bool, republish chan<- struct{}) {
	if changed {
		select {
		case republish <- struct{}{}:
		default:
		}
	}
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// note records a check's result, and reports whether the verdict changed.
func (g *healthGate) note(err error, took time.Duration) (changed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v := &g.v
	changed = !v.checked || v.passing != (err == nil)
	if !v.checked {
		close(g.first)
	}
	v.checked, v.passing, v.took = true, err == nil, took
	if err == nil {
		v.streak, v.last = 0, nil
	} else {
		v.streak++
		v.last = err
	}
	return changed
}

// verdict returns the gate's state.
func (g *healthGate) verdict() healthVerdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.v
}

// unhealthy is what the candidate record says of a check that keeps the
// candidate from claiming: a failing one's error, cut to maxUnhealthyText,
// or that the first check has not returned; "" while passing.
func (g *healthGate) unhealthy() string {
	if g == nil {
		return ""
	}
	v := g.verdict()
	switch {
	case !v.checked:
		return firstCheckPending
	case v.passing:
		return ""
	}
	text := fmt.Sprintf("%d failed checks in a row: %v", v.streak, v.last)
	if len(text) > maxUnhealthyText {
		text = strings.ToValidUTF8(text[:maxUnhealthyText], "") + "…"
	}
	return text
}

// healthWake is the channel that wakes the campaigner when the health
// check's verdict may have changed; nil (never ready) without a check.
func (c *campaigner) healthWake() <-chan struct{} {
	if c.health == nil {
		return nil
	}
	return c.health.wake
}

// healthRefusal returns the error that keeps this candidate from claiming
// (matching ErrHealthCheck), or nil: its latest check failed, or none has
// returned yet. It publishes a change of verdict first (noteHealth).
func (c *campaigner) healthRefusal() error {
	if c.health == nil {
		return nil
	}
	v := c.noteHealth()
	switch {
	case !v.checked:
		return fmt.Errorf("%w: %s", ErrHealthCheck, firstCheckPending)
	case !v.passing:
		return fmt.Errorf("%w: %d times in a row, the latest: %w", ErrHealthCheck, v.streak, v.last)
	}
	return nil
}

// healthFails returns the cause for a leader to stand down (matching
// ErrHealthCheck) once its check failed the configured number of times in
// a row, or nil.
func (c *campaigner) healthFails() error {
	if c.health == nil {
		return nil
	}
	v := c.noteHealth()
	if v.passing || v.streak < c.health.cfg.failures {
		return nil
	}
	return fmt.Errorf("%w: %d times in a row (the limit is %d, every %v), the latest: %w",
		ErrHealthCheck, v.streak, c.health.cfg.failures, c.health.cfg.interval, v.last)
}

// noteHealth reads the gate's verdict and, when it changed since the
// campaigner last looked, logs it and emits EventHealth. It runs on the
// campaign goroutine, as every emit does.
func (c *campaigner) noteHealth() healthVerdict {
	v := c.health.verdict()
	if !v.checked || v.passing != c.healthFailing {
		return v
	}
	c.healthFailing = !v.passing
	if v.passing {
		c.e.log.Info("the health check passes again; campaigning", "took", v.took.Round(time.Millisecond))
		c.emit(Event{Kind: EventHealth, Duration: v.took})
		return v
	}
	err := fmt.Errorf("%w: %w", ErrHealthCheck, v.last)
	if c.e.State() == LeaderState {
		c.e.log.Warn("the health check failed; the leader stands down if it fails as often in a row as allowed", "error", v.last, "failures_allowed", c.health.cfg.failures, "took", v.took.Round(time.Millisecond))
	} else {
		c.e.log.Warn("the health check failed; not claiming the key until it passes", "error", v.last, "took", v.took.Round(time.Millisecond))
	}
	c.emit(Event{Kind: EventHealth, Duration: v.took, Err: err})
	return v
}

// awaitFirstCheck waits, before the first claim, for the first health
// check to return, and reports false if ctx was done first.
func (c *campaigner) awaitFirstCheck(ctx context.Context) bool {
	if c.health == nil {
		return true
	}
	select {
	case <-c.health.first:
		return true
	case <-ctx.Done():
		return false
	}
}

// standDownUnhealthy ends the tenure t because its health check failed too
// often (cause), as a resignation does: once the work returned, a release
// over which another candidate leads at once, which this node sits out. It
// reports whether the tenure ended.
func (c *campaigner) standDownUnhealthy(t *tenure) bool {
	cause := c.healthFails()
	if cause == nil {
		return false
	}
	c.e.log.Warn("the health check failed too often; standing down and releasing the key", "error", cause, "revision", t.revision)
	c.standDown(t, cause)
	if c.workDone.Load() {
		c.release(t) // Once's work ran: its done mark
		return true
	}
	c.sitOutRev = c.releaseAs(t, releaseValue(c.e.name))
	return true
}
