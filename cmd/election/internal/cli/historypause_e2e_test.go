//go:build linux

package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/kvelect/election/sidecar"
)

// TestHistoryDatesAPausedLeadersStandDownToItsDeadline runs two sidecar
// processes on a bucket with a history, at a 2 s TTL, and stops the
// leader's with SIGSTOP until the other leads, then continues it. The
// paused leader stands down only when it runs again, but the history
// places its stand-down at its validity deadline (within the validity
// after the stop), marked late, and before the other's win: the history
// never shows two leaders at once.
func TestHistoryDatesAPausedLeadersStandDownToItsDeadline(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	url := s.ClientURL()
	const ttl = 2 * time.Second
	timing := election.TimingFor(ttl, 0)
	if code, stdout, stderr := runCLI(t, "bucket", "create", "-s", url, "--bucket", "HP", "--ttl", ttl.String(), "--history", "1h"); code != ExitOK {
		t.Fatalf("bucket create: exit %d\n%s%s", code, stdout, stderr)
	}
	ports, err := embedded.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	type replica struct {
		name, base string
		sidecar    *e2e.Process
	}
	var replicas []*replica
	for i, name := range []string{"pod-a", "pod-b"} {
		base := fmt.Sprintf("http://127.0.0.1:%d", ports[i])
		replicas = append(replicas, &replica{name: name, base: base, sidecar: e2e.StartProcess(t, bin, name, "sidecar", "--server", url,
			"--bucket", "HP", "--key", "job", "--name", name, "--listen", strings.TrimPrefix(base, "http://"), "--log-format", "json")})
	}
	leads := func(r *replica) bool {
		code, _, err := e2e.Get(r.base + "/self")
		return err == nil && code == http.StatusOK
	}
	leader := testenv.Poll(t, "a sidecar leading", e2e.WaitTimeout, func() (*replica, bool) {
		for _, r := range replicas {
			if leads(r) {
				return r, true
			}
		}
		return nil, false
	})
	other := replicas[0]
	if other == leader {
		other = replicas[1]
	}
	// Its win is recorded before it is paused.
	history := func() []historyJSON {
		code, stdout, stderr := runCLI(t, "history", "-s", url, "--bucket", "HP", "--key", "job", "--json")
		if code != ExitOK {
			t.Fatalf("history --json: exit %d, %s", code, stderr)
		}
		var events []historyJSON
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
			var ev historyJSON
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("history --json printed %q: %v", line, err)
			}
			events = append(events, ev)
		}
		return events
	}
	testenv.Poll(t, leader.name+"'s win recorded", e2e.WaitTimeout, func() ([]historyJSON, bool) {
		events := history()
		return events, len(events) == 1 && events[0].Name == leader.name
	})

	if err := leader.sidecar.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	continued := false
	t.Cleanup(func() {
		if !continued {
			leader.sidecar.Cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	testenv.Eventually(t, other.name+" leading", e2e.WaitTimeout, func() bool { return leads(other) })
	// Paused on through two of the new leader's renewals: the stand-down
	// comes well over a second after the deadline.
	renewals := map[time.Time]bool{}
	testenv.Poll(t, other.name+" renewing twice", e2e.WaitTimeout, func() (int, bool) {
		code, body, err := e2e.Get(other.base + "/leader")
		var v sidecar.Leadership
		if err == nil && code == http.StatusOK && json.Unmarshal([]byte(body), &v) == nil && v.Renewed != nil {
			renewals[*v.Renewed] = true
		}
		return len(renewals), len(renewals) >= 3 // its claim and two renewals
	})
	continued = true
	if err := leader.sidecar.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()

	events := testenv.Poll(t, leader.name+"'s stand-down recorded", e2e.WaitTimeout, func() ([]historyJSON, bool) {
		events := history()
		return events, len(events) == 3
	})
	won, down, next := events[0], events[1], events[2]
	t.Logf("stopped %s at %s, continued at %s; the history: %+v", leader.name, stopped.UTC().Format("15:04:05.000"), resumed.UTC().Format("15:04:05.000"), events)
	switch {
	case won.Name != leader.name || won.Kind != "won" || won.Late:
		t.Errorf("first event %+v, want %s's win, on time", won, leader.name)
	case down.Name != leader.name || down.Kind != "stood_down" || down.Token != won.Token:
		t.Errorf("second event %+v, want %s's stand-down with token %d", down, leader.name, won.Token)
	case next.Name != other.name || next.Kind != "won":
		t.Errorf("third event %+v, want %s's win", next, other.name)
	}
	// The validity counts from the last write sent before the stop, so it
	// ends after the stop, and within a validity of it; the server stamps
	// the record a publish's trip after the delay was measured (allowed:
	// 150 ms, on a loaded machine).
	if !down.Late || down.Delay < time.Second || down.At.Before(stopped) || down.At.After(stopped.Add(timing.Validity+150*time.Millisecond)) {
		t.Errorf("the stand-down at %s, late %v by %v: want it late, at the validity deadline, %v after the stop at %s at most",
			down.At.Format("15:04:05.000"), down.Late, down.Delay, timing.Validity, stopped.UTC().Format("15:04:05.000"))
	}
	if !down.At.Before(next.At) {
		t.Errorf("%s stood down at %s, not before %s won at %s", leader.name, down.At.Format("15:04:05.000"), other.name, next.At.Format("15:04:05.000"))
	}

	code, stdout, _ := runCLI(t, "history", "-s", url, "--bucket", "HP", "--key", "job")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	late := regexp.MustCompile(`^\S+ \S+ +job +stood down +` + leader.name + ` +\d+ +.* \(recorded \d+(\.\d+)?m?s late\)$`)
	if code != ExitOK || len(lines) != 4 || !late.MatchString(lines[2]) || !strings.Contains(lines[3], other.name) {
		t.Errorf("history: exit %d:\n%s\nwant the late stand-down on the second event's line, before %s's win", code, stdout, other.name)
	}
}
