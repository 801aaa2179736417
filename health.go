package election

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// CheckHealth returns an error wrapping ErrUnhealthy if this node still
// counts itself leader although its validity deadline passed more than
// tolerance ago: the campaign goroutine has neither renewed nor stood down,
// so it is stuck (in an OnCampaign callback that does not return, say) or
// the process was paused. Time the machine slept (SuspendReporter) counts
// as passed, though the election's clock stood still through it. The error names the key, the candidate, the
// leadership's fencing token and how late it is. CheckHealth returns nil
// while the node leads within its deadline, campaigns as a candidate, or is
// not running; a negative tolerance gives an error wrapping
// ErrInvalidArgument.
//
// It is the peer of the Kubernetes leader-election watchdog
// (HealthzAdaptor). IsLeader is already false past the deadline; this check
// is for a supervisor that should restart a process whose election no longer
// makes progress. A tolerance of a few seconds absorbs scheduling delay.
func (e *Election) CheckHealth(tolerance time.Duration) error {
	if err := checkTolerance(tolerance); err != nil {
		return err
	}
	e.mu.Lock()
	state, validUntil, validSlept, token := e.state, e.validUntil, e.validSlept, e.token
	e.mu.Unlock()
	if state != LeaderState {
		return nil
	}
	late := e.clock.Now().Sub(validUntil)
	slept := ""
	if s := suspended(e.clock) - validSlept; s > suspendNoise { // the clock stood still for s meanwhile
		late += s
		slept = fmt.Sprintf(" (the machine slept %v of it)", s.Round(time.Millisecond))
	}
	if late <= tolerance {
		return nil
	}
	return fmt.Errorf("%w: key %q name %q still counts itself leader (token %d) %v after its validity deadline%s (tolerance %v): the campaign goroutine has neither renewed nor stood down",
		ErrUnhealthy, e.key, e.name, token, late.Round(time.Millisecond), slept, tolerance)
}

// HealthHandler returns an HTTP handler that runs CheckHealth(tolerance) on
// each of elections and answers 200 and "ok" when every check passes, and
// otherwise 503 with one line per failed check, naming the key, the
// candidate and the reason. Serve it at /healthz for a liveness probe.
func HealthHandler(tolerance time.Duration, elections ...*Election) http.Handler {
	return healthHandler{tolerance: tolerance, elections: slices.Clone(elections)}
}

type healthHandler struct {
	tolerance time.Duration
	elections []*Election
}

func (h healthHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	problems := h.problems()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if len(problems) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, strings.Join(problems, "\n"))
		return
	}
	fmt.Fprintln(w, "ok")
}

// problems returns one line per failed check.
func (h healthHandler) problems() []string {
	if err := checkTolerance(h.tolerance); err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for i, e := range h.elections {
		if e == nil {
			problems = append(problems, fmt.Sprintf("election %d of %d passed to HealthHandler is nil", i+1, len(h.elections)))
			continue
		}
		if err := e.CheckHealth(h.tolerance); err != nil {
			problems = append(problems, err.Error())
		}
	}
	return problems
}

func checkTolerance(tolerance time.Duration) error {
	if tolerance < 0 {
		return fmt.Errorf("%w: health check tolerance %v: allowed: 0 or more", ErrInvalidArgument, tolerance)
	}
	return nil
}
