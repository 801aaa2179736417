//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// historyLines returns election history's JSON lines for key as "NAME KIND"
// (with the win's AFTER), oldest first.
func historyLines(t *testing.T, url, bucket, key string, auth ...string) []string {
	t.Helper()
	code, stdout, stderr := runCLI(t, append([]string{"history", "-s", url, "--bucket", bucket, "--key", key, "--json"}, auth...)...)
	if code != 0 {
		t.Fatalf("election history: exit %d: %s", code, stderr)
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if line == "" {
			continue
		}
		var ev history.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("a line of election history --json: %q: %v", line, err)
		}
		lines = append(lines, strings.TrimSpace(ev.Name+" "+ev.Kind+" "+ev.After))
	}
	return lines
}

// waitHistory polls election history until it holds want, in order.
func waitHistory(t *testing.T, url, bucket, key string, want ...string) {
	t.Helper()
	testenv.Poll(t, "the history "+strings.Join(want, "; "), e2e.WaitTimeout, func() (string, bool) {
		got := historyLines(t, url, bucket, key)
		return strings.Join(got, "; "), strings.Join(got, "; ") == strings.Join(want, "; ")
	})
}

// TestPlainBucketAndRunRecordEveryChange makes a bucket with a plain
// election bucket create and runs plain election run processes: a leader
// that stops, a takeover, a leader killed, a takeover after the TTL and a
// last stop each show in election history, in order.
func TestPlainBucketAndRunRecordEveryChange(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	url := s.ClientURL()
	if code, stdout, stderr := runCLI(t, "bucket", "create", "-s", url, "--bucket", "E2E", "--ttl", "2s"); code != 0 || !strings.Contains(stdout, "history of bucket E2E: kept 7d") {
		t.Fatalf("bucket create: exit %d, %s%s; want a history kept 7 days", code, stdout, stderr)
	}
	starts, cmd := recordedStarts(t)
	daemons := map[string]*e2e.Process{}
	for i := range 3 {
		name := fmt.Sprintf("node%d", i)
		daemons[name] = e2e.StartDaemon(t, bin, name, "--server", url, "--bucket", "E2E", "--key", "job", "--", cmd[0], cmd[1], cmd[2])
	}

	first := e2e.WaitStarts(t, starts, 1)[0]
	waitHistory(t, url, "E2E", "job", first.Name+" won no key")
	daemons[first.Name].Cmd.Process.Signal(syscall.SIGTERM) // stops, releases
	daemons[first.Name].Wait(t)
	second := e2e.WaitStarts(t, starts, 2)[1]
	waitHistory(t, url, "E2E", "job", first.Name+" won no key", first.Name+" stood_down",
		second.Name+" won released by "+first.Name)
	daemons[second.Name].Cmd.Process.Kill() // records nothing; the key ages out
	daemons[second.Name].Wait(t)
	third := e2e.WaitStarts(t, starts, 3)[2]
	daemons[third.Name].Cmd.Process.Signal(syscall.SIGTERM)
	daemons[third.Name].Wait(t)
	waitHistory(t, url, "E2E", "job", first.Name+" won no key", first.Name+" stood_down",
		second.Name+" won released by "+first.Name, third.Name+" won no key", third.Name+" stood_down")
	for name, d := range daemons {
		if log := d.Logged(t); strings.Contains(log, `"level":"warning"`) {
			t.Errorf("%s warned:\n%s", name, log)
		}
	}
}

// TestRunDeniedTheHistoryWarnsOnceAndLeads runs election run as a user who
// may do all a candidate does, history included, but publish to the
// history's subjects: each process warns once, and the election works as
// ever: a leader, a stop, a takeover.
func TestRunDeniedTheHistoryWarnsOnceAndLeads(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	perms, err := rolePermissions(roleCandidate, "E2E", "", "", true)
	if err != nil {
		t.Fatal(err)
	}
	perms.pubDeny = append(perms.pubDeny, "kvelect.history.>")
	user, root := roleServer(t, perms.serverBlock())
	_, js := testenv.Connect(t, root)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2E", TTL: 2 * time.Second})
	h, err := history.Create(context.Background(), js, "E2E", 0)
	if err != nil {
		t.Fatal(err)
	}
	starts, cmd := recordedStarts(t)
	daemons := map[string]*e2e.Process{}
	for i := range 2 {
		name := fmt.Sprintf("node%d", i)
		daemons[name] = e2e.StartDaemon(t, bin, name, "--server", user, "--user", roleUser, "--password", secret,
			"--bucket", "E2E", "--key", "job", "--", cmd[0], cmd[1], cmd[2])
	}
	first := e2e.WaitStarts(t, starts, 1)[0]
	leader := daemons[first.Name]
	// Past the first attempt's timeout, so that the warning and retries
	// happen while it leads.
	testenv.Eventually(t, "the warning of the leader", e2e.WaitTimeout, func() bool {
		return strings.Contains(leader.Logged(t), `"level":"warning"`)
	})
	leader.Cmd.Process.Signal(syscall.SIGTERM)
	leader.Wait(t)
	second := e2e.WaitStarts(t, starts, 2)[1]
	if second.Name == first.Name || second.Token <= first.Token {
		t.Fatalf("after SIGTERM to %s (token %d), the command started on %s with token %d; want the other, a larger token",
			first.Name, first.Token, second.Name, second.Token)
	}
	daemons[second.Name].Cmd.Process.Signal(syscall.SIGTERM)
	daemons[second.Name].Wait(t)
	for name, d := range daemons {
		log := d.Logged(t)
		// The first leader's first record timed out, as a denied publish
		// does: its warning names the permission. The second's may instead
		// be cut short by its SIGTERM, which blames no permission.
		n := strings.Count(log, `"level":"warning"`)
		if n != 1 || name == first.Name && !strings.Contains(log, "publish to kvelect.history.E2E.") {
			t.Errorf("%s: %d warnings, want one (naming the history's subjects for the first leader):\n%s", name, n, log)
		}
		if strings.Contains(log, `"level":"error"`) {
			t.Errorf("%s logged an error:\n%s", name, log)
		}
	}
	if events, err := h.Events(context.Background(), "job", time.Time{}); err != nil || len(events) != 0 {
		t.Errorf("the history holds %v (%v), want nothing: the user may not write it", events, err)
	}
}

// TestRunWithHistoryFalseRecordsNothing: --history=false records nothing in
// a bucket that keeps a history.
func TestRunWithHistoryFalseRecordsNothing(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	if code, stdout, stderr := runCLI(t, "bucket", "create", "-s", url, "--bucket", "OFF", "--ttl", "2s"); code != 0 {
		t.Fatalf("bucket create: exit %d, %s%s", code, stdout, stderr)
	}
	code, stdout, stderr := runCLI(t, "run", "-s", url, "--bucket", "OFF", "--key", "job", "--once", "--history=false", "--", "true")
	if code != 0 || strings.Contains(stderr, "history") {
		t.Fatalf("run --history=false: exit %d, %s%s; want 0, and nothing said of the history", code, stdout, stderr)
	}
	if got := historyLines(t, url, "OFF", "job"); len(got) != 0 {
		t.Errorf("the history holds %q, want nothing", got)
	}
	if code, _, stderr := runCLI(t, "run", "-s", url, "--bucket", "OFF", "--key", "other", "--once", "--", "true"); code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	if got := historyLines(t, url, "OFF", "other"); len(got) != 4 {
		t.Errorf("after a plain run the history holds %q, want its win, its run's start and outcome, and its stand-down", got)
	}
}

// TestDemoRecordsInItsHistory runs the demo against a server: the bucket
// it creates gets a history, and its workers record in it.
func TestDemoRecordsInItsHistory(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	url := s.ClientURL()
	demo := exec.Command(bin)
	demo.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "NATS_CONTEXT=", "CONTEXT=", "NATS_URL="+url,
		"WORKERS=2", "NOSPLAY=1", "TTL=2s", "LOG_FORMAT=json")
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- demo.Wait() }()
	t.Cleanup(func() {
		demo.Process.Kill()
		<-exited
	})
	testenv.Poll(t, "a worker's win in the history", e2e.WaitTimeout, func() (string, bool) {
		code, stdout, _ := runCLI(t, "history", "-s", url, "--bucket", "DEMO_ELECTION", "--key", "demo", "--json")
		return stdout, code == 0 && strings.Contains(stdout, `"kind":"won"`)
	})
	demo.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("the demo exited with %v after SIGINT, want 0", err)
		}
	case <-time.After(e2e.WaitTimeout):
		t.Fatalf("the demo still runs %v after SIGINT", e2e.WaitTimeout)
	}
	if got := historyLines(t, url, "DEMO_ELECTION", "demo"); len(got) < 2 || !strings.Contains(got[len(got)-1], "stood_down") {
		t.Errorf("the demo's history is %q, want a win and, last, the leader's stand-down", got)
	}
}
