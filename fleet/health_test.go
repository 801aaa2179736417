package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/internal/testenv"
)

// Health-checked daemons: a node whose check of a daemon fails stops
// offering it, and the daemon moves to a node that offers it.

// The health checks' timing in these tests: a node stops offering a daemon
// 3 failed checks after its dependency broke, at most 4 intervals.
const (
	healthInterval = 100 * time.Millisecond
	healthFailures = 3
)

// healthCheck is a settable health check that counts its calls.
type healthCheck struct {
	mu    sync.Mutex
	err   error
	calls atomic.Int64
}

func (c *healthCheck) set(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

func (c *healthCheck) check(context.Context) error {
	c.calls.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// awaitCalls waits until the check has run n more times.
func (c *healthCheck) awaitCalls(t *testing.T, what string, n int64) {
	t.Helper()
	awaitAllCalls(t, what, n, c)
}

// awaitAllCalls waits until each check has run n more times.
func awaitAllCalls(t *testing.T, what string, n int64, checks ...*healthCheck) {
	t.Helper()
	from := make([]int64, len(checks))
	for i, c := range checks {
		from[i] = c.calls.Load()
	}
	testenv.Eventually(t, what, awaitTimeout, func() bool {
		for i, c := range checks {
			if c.calls.Load() < from[i]+n {
				return false
			}
		}
		return true
	})
}

// ended is the cause a run of a daemon ended with.
type ended struct {
	node  string
	cause error
}

// checkedDaemon is a daemon of the ledger, health-checked by check, that
// sends the cause its context ended with to causes.
func (f *testFleet) checkedDaemon(name, node string, check *healthCheck, causes chan<- ended) fleet.Daemon {
	return fleet.Daemon{
		Name: name,
		Run: func(ctx context.Context) error {
			token, _ := election.TokenFromContext(ctx)
			r := f.ledger.begin(name, node, token)
			<-ctx.Done()
			causes <- ended{node, context.Cause(ctx)}
			f.ledger.finish(r)
			return nil
		},
		Health: check.check, HealthInterval: healthInterval, HealthFailures: healthFailures,
	}
}

// memberStatus reads the fleet's status until ok accepts the member named.
func memberStatus(t *testing.T, f *testFleet, name, what string, ok func(fleet.Member) bool) fleet.Member {
	t.Helper()
	_, b := f.open()
	return testenv.Poll(t, what, awaitTimeout, func() (fleet.Member, bool) {
		st, err := fleet.ReadStatus(context.Background(), b)
		if err != nil {
			return fleet.Member{}, false
		}
		for _, m := range st.Members {
			if m.Name == name {
				return m, ok(m)
			}
		}
		return fleet.Member{}, false
	})
}

// TestAFailingHealthCheckMovesTheDaemon runs daemon x on a, with b able to
// run it, then fails a's check of x: x moves to b within the checks'
// failures and a few milliseconds, never on both at once (the ledger), and
// the cause of a's run names the check; status shows x unhealthy on a. Once
// a's check passes again a offers x again, but x stays on b (no move back
// for it); when b's check fails in turn, x moves back to a.
func TestAFailingHealthCheckMovesTheDaemon(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "HEALTHMOVE")
	checks := map[string]*healthCheck{"a": {}, "b": {}}
	causes := make(chan ended, 10)
	standDowns := make(chan election.Event, 16) // of the daemon's elections: what the history records
	f.hook = func(ev election.Event) {
		if ev.Kind == election.EventLost && strings.HasSuffix(ev.Key, ".x") {
			standDowns <- ev
		}
	}
	for _, node := range []string{"a", "b"} {
		f.joinWith(fleet.Config{Name: node, Logger: testenv.Logger(t).With("node", node),
			Daemons: []fleet.Daemon{f.checkedDaemon("x", node, checks[node], causes)}})
		if node == "a" {
			f.awaitPlacement("x on a", func(where map[string]string, _ map[string]int) bool { return where["x"] == "a" })
		}
	}
	f.awaitPlacement("x on a, b joined", func(where map[string]string, _ map[string]int) bool { return where["x"] == "a" })

	broke := time.Now()
	checks["a"].set(errors.New("db unreachable from a"))
	f.awaitPlacement("x on b", func(where map[string]string, _ map[string]int) bool { return where["x"] == "b" })
	moved := f.ledger.lastStart().Sub(broke)
	t.Logf("x ran on b %v after a's check began to fail (interval %v, %d failures)", moved.Round(time.Millisecond), healthInterval, healthFailures)
	if limit := healthInterval*(healthFailures+1) + 500*time.Millisecond; moved > limit {
		t.Errorf("x moved %v after a's check began to fail, want within %v", moved, limit)
	}
	e := <-causes
	if e.node != "a" || !errors.Is(e.cause, fleet.ErrRevoked) || !errors.Is(e.cause, election.ErrHealthCheck) ||
		!strings.Contains(e.cause.Error(), "db unreachable from a") {
		t.Errorf("x's run on %s ended with %v, want a revocation on a matching ErrRevoked and election.ErrHealthCheck, naming the check's error", e.node, e.cause)
	}
	if ev := <-standDowns; ev.Name != "a" || !errors.Is(ev.Err, election.ErrStopped) || !errors.Is(ev.Err, election.ErrHealthCheck) ||
		!strings.Contains(ev.Err.Error(), "db unreachable from a") {
		t.Errorf("x's election on %s stood down for %v, want ErrStopped wrapping the health check's error, as the history records it", ev.Name, ev.Err)
	}
	m := memberStatus(t, f, "a", "a not offering x", func(m fleet.Member) bool { return len(m.Daemons) == 0 })
	if why := m.Unhealthy["x"]; !strings.Contains(why, "db unreachable from a") {
		t.Errorf("a's status says x is unhealthy for %q (%+v), want the check's error", why, m)
	}

	checks["a"].set(nil)
	memberStatus(t, f, "a", "a offering x again", func(m fleet.Member) bool {
		return slices.Equal(m.Daemons, []string{"x"}) && len(m.Unhealthy) == 0
	})
	checks["a"].awaitCalls(t, "a's check to pass a few more times", 3)
	f.awaitPlacement("x still on b", func(where map[string]string, _ map[string]int) bool { return where["x"] == "b" })

	checks["b"].set(errors.New("db unreachable from b"))
	f.awaitPlacement("x back on a", func(where map[string]string, _ map[string]int) bool { return where["x"] == "a" })
	if e := <-causes; e.node != "b" || !strings.Contains(e.cause.Error(), "db unreachable from b") {
		t.Errorf("x's run on %s ended with %v, want b's check's error", e.node, e.cause)
	}
	if starts := len(f.ledger.runs); starts != 3 {
		t.Errorf("x started %d times, want 3: on a, b, then a", starts)
	}
}

// TestADaemonWhoseCheckFailsEverywhereRunsNowhere fails the check of x on
// both nodes from the start: x never starts, nothing claims it over and
// over, status lists it stopped, and a node logs that it runs nowhere;
// once a's check passes x starts there, once; when it fails again x stops
// and stays stopped.
func TestADaemonWhoseCheckFailsEverywhereRunsNowhere(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "HEALTHNOWHERE")
	checks := map[string]*healthCheck{"a": {}, "b": {}}
	causes := make(chan ended, 10)
	logs := &lockedBuffer{}
	for _, node := range []string{"a", "b"} {
		checks[node].set(fmt.Errorf("db unreachable from %s", node))
		cfg := fleet.Config{Name: node, Daemons: []fleet.Daemon{f.checkedDaemon("x", node, checks[node], causes)},
			Logger: testenv.Logger(t).With("node", node)}
		if node == "a" {
			cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		}
		f.joinWith(cfg)
	}
	// Longer than a TTL: a node that placement did not choose claims a
	// free daemon a TTL after it saw it free, unless it does not offer it.
	awaitAllCalls(t, "both checks to fail for a TTL", int64(ttl/healthInterval)+5, checks["a"], checks["b"])
	if starts := len(f.ledger.runs); starts != 0 {
		t.Errorf("x started %d times while its check failed on every node, want 0", starts)
	}
	_, b := f.open()
	st := testenv.Poll(t, "x stopped, unhealthy on both", awaitTimeout, func() (fleet.Status, bool) {
		st, err := fleet.ReadStatus(context.Background(), b)
		return st, err == nil && len(st.Members) == 2 && len(st.Members[0].Unhealthy) == 1 && len(st.Members[1].Unhealthy) == 1
	})
	if len(st.Daemons) != 1 || st.Daemons[0].Name != "x" || st.Daemons[0].State != fleet.Stopped {
		t.Errorf("status daemons %+v, want x stopped", st.Daemons)
	}
	testenv.Eventually(t, "a to log that x runs nowhere", awaitTimeout, func() bool {
		return strings.Contains(logs.String(), "the daemon runs nowhere")
	})
	for _, n := range f.nodes {
		if !n.Balanced() {
			t.Errorf("a node is not balanced with x offered nowhere: it has something to do")
		}
	}

	checks["a"].set(nil)
	f.awaitPlacement("x on a", func(where map[string]string, _ map[string]int) bool { return where["x"] == "a" })
	checks["a"].set(errors.New("db unreachable from a again"))
	testenv.Eventually(t, "x to stop on a", awaitTimeout, func() bool { return len(f.ledger.where()) == 0 })
	if e := <-causes; e.node != "a" || !errors.Is(e.cause, election.ErrHealthCheck) {
		t.Errorf("x's run on %s ended with %v, want a's check's failure", e.node, e.cause)
	}
	awaitAllCalls(t, "both checks to fail for another TTL", int64(ttl/healthInterval)+5, checks["a"], checks["b"])
	if starts := len(f.ledger.runs); starts != 1 {
		t.Errorf("x started %d times, want once, on a while its check passed", starts)
	}
}

// TestAHangingHealthCheckFails hangs a's check of x, ignoring its context:
// each interval it has not returned counts as a failure, and x moves to b.
func TestAHangingHealthCheckFails(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "HEALTHHANG")
	var hang atomic.Bool
	release := make(chan struct{})
	defer close(release) // the hung check returns before the leak check
	hanging := func(context.Context) error {
		if hang.Load() {
			<-release
		}
		return nil
	}
	causes := make(chan ended, 10)
	a := f.checkedDaemon("x", "a", &healthCheck{}, causes)
	a.Health = hanging
	f.joinWith(fleet.Config{Name: "a", Daemons: []fleet.Daemon{a}, Logger: testenv.Logger(t).With("node", "a")})
	f.awaitPlacement("x on a", func(where map[string]string, _ map[string]int) bool { return where["x"] == "a" })
	f.joinWith(fleet.Config{Name: "b", Daemons: []fleet.Daemon{f.checkedDaemon("x", "b", &healthCheck{}, causes)},
		Logger: testenv.Logger(t).With("node", "b")})
	hung := time.Now()
	hang.Store(true)
	f.awaitPlacement("x on b", func(where map[string]string, _ map[string]int) bool { return where["x"] == "b" })
	t.Logf("x ran on b %v after a's check began to hang", f.ledger.lastStart().Sub(hung).Round(time.Millisecond))
	if e := <-causes; e.node != "a" || !strings.Contains(e.cause.Error(), "has not returned") {
		t.Errorf("x's run on %s ended with %v, want a's check that has not returned", e.node, e.cause)
	}
	f.nodes["a"].Leave() // with its check still hung
}

// TestJoinRefusesABadHealthCheck: each error names the daemon, the field
// and what is allowed.
func TestJoinRefusesABadHealthCheck(t *testing.T) {
	t.Parallel()
	run := func(context.Context) error { return nil }
	check := func(context.Context) error { return nil }
	for what, tc := range map[string]struct {
		d    fleet.Daemon
		says string
	}{
		"an interval without a check": {fleet.Daemon{Name: "x", Run: run, HealthInterval: time.Second},
			`daemon "x" of node "a" has a HealthInterval or HealthFailures but no Health check`},
		"failures without a check": {fleet.Daemon{Name: "x", Run: run, HealthFailures: 2},
			`daemon "x" of node "a" has a HealthInterval or HealthFailures but no Health check`},
		"a negative interval": {fleet.Daemon{Name: "x", Run: run, Health: check, HealthInterval: -time.Second},
			`health interval -1s of daemon "x": want 0 (the default, 5s) or at least 10ms`},
		"an interval too short": {fleet.Daemon{Name: "x", Run: run, Health: check, HealthInterval: time.Millisecond},
			`health interval 1ms of daemon "x": want 0 (the default, 5s) or at least 10ms`},
		"negative failures": {fleet.Daemon{Name: "x", Run: run, Health: check, HealthFailures: -1},
			`health failures -1 of daemon "x": want 0 (the default, 3) or more`},
	} {
		cfg := fleet.Config{Name: "a", Daemons: []fleet.Daemon{tc.d}}
		err := cfg.Validate()
		if !errors.Is(err, fleet.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want ErrInvalidConfig saying %q", what, err, tc.says)
		}
	}
	ok := fleet.Config{Name: "a", Daemons: []fleet.Daemon{{Name: "x", Run: run, Health: check}, {Name: "y", Run: run, Health: check, HealthInterval: 10 * time.Millisecond, HealthFailures: 1}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("a good configuration refused: %v", err)
	}
}
