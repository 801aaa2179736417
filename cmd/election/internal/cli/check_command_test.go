package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestCheckSaysWhetherAKeyHasALeader: a key with a leader is OK (exit 0) in
// every format; a key without one is CRITICAL (exit 2); an unreachable server
// is UNKNOWN (exit 3), as nats server check answers.
func TestCheckSaysWhetherAKeyHasALeader(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CHK", TTL: 2 * time.Second})
	e, err := election.NewElection(context.Background(), "host-a", "job", kv, election.WithoutSplay())
	if err != nil {
		t.Fatal(err)
	}
	startUntilCleanup(t, e)
	testenv.Eventually(t, "host-a leads", e2e.WaitTimeout, e.IsLeader)

	code, stdout, stderr := runCLI(t, "check", "-s", url, "--bucket", "CHK", "--key", "job")
	if code != checkOK || !strings.HasPrefix(stdout, "OK KVELECT CHK OK:job led by host-a, renewed ") ||
		!strings.Contains(stdout, "'has_leader:job'=1;;1 'renew_age:job'=") || stderr != "" {
		t.Errorf("nagios: exit %d, %q %q; want 0 and OK with perfdata", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "check", "-s", url, "--bucket", "CHK", "--key", "job", "--format", "json")
	var r checkResult
	if err := json.Unmarshal([]byte(stdout), &r); code != checkOK || err != nil || r.Status != "OK" || len(r.PerfData) != 2 {
		t.Errorf("json: exit %d, %q (%v); want status OK and two perf data", code, stdout, err)
	}
	code, stdout, _ = runCLI(t, "check", "-s", url, "--bucket", "CHK", "--key", "job", "--key", "idle", "--format", "prometheus")
	for _, says := range []string{"# TYPE kvelect_check_status_code gauge\n", `kvelect_check_status_code{bucket="CHK"} 2` + "\n",
		`kvelect_check_has_leader{bucket="CHK",key="job"} 1` + "\n", `kvelect_check_has_leader{bucket="CHK",key="idle"} 0` + "\n",
		`kvelect_check_renew_age_seconds{bucket="CHK",key="job"} `} {
		if !strings.Contains(stdout, says) {
			t.Errorf("prometheus: stdout does not say %q:\n%s", says, stdout)
		}
	}
	if code != checkCritical {
		t.Errorf("prometheus with a key without a leader: exit %d, want 2", code)
	}

	code, stdout, _ = runCLI(t, "check", "-s", url, "--bucket", "CHK", "--key", "idle")
	if code != checkCritical || !strings.HasPrefix(stdout, "CRITICAL KVELECT CHK Crit:idle has no leader and no candidate: is the key right? keys with candidates: job |") {
		t.Errorf("a key without a leader: exit %d, %q; want 2 and CRITICAL", code, stdout)
	}
	code, stdout, _ = runCLI(t, "check", "-s", url, "--bucket", "CHK", "--key", "idle", "--format", "text")
	if code != checkCritical || !strings.Contains(stdout, "election check CHK: CRITICAL\n  critical: idle has no leader and no candidate: is the key right? keys with candidates: job\n") {
		t.Errorf("text: exit %d, %q", code, stdout)
	}

	code, stdout, _ = runCLI(t, "check", "-s", "nats://127.0.0.1:1", "--bucket", "CHK", "--key", "job")
	if code != checkUnknown || !strings.HasPrefix(stdout, "UNKNOWN KVELECT CHK Unknown:connecting to nats://127.0.0.1:1") {
		t.Errorf("an unreachable server: exit %d, %q; want 3 and UNKNOWN", code, stdout)
	}
	code, stdout, _ = runCLI(t, "check", "-s", url, "--bucket", "NOPE", "--key", "job")
	if code != checkUnknown || !strings.Contains(stdout, `bucket "NOPE" does not exist`) {
		t.Errorf("a missing bucket: exit %d, %q; want 3", code, stdout)
	}
	for says, args := range map[string][]string{
		"nothing to check":                     {},
		`--format "xml": want nagios`:          {"--key", "job", "--format", "xml"},
		`--namespace "1x"`:                     {"--key", "job", "--namespace", "1x"},
		"flag provided but not defined: -nope": {"--nope"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"check", "-s", url}, args...)...)
		e2e.WantOneLineError(t, code, checkUnknown, stdout, stderr, says)
	}
}

// TestCheckFleetFindsADaemonRunningNowhere: a fleet member that lists a
// daemon no node runs makes the fleet check CRITICAL.
func TestCheckFleetFindsADaemonRunningNowhere(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "FLEET", TTL: 2 * time.Second})

	code, stdout, _ := runCLI(t, "check", "-s", url, "--bucket", "FLEET", "--fleet")
	if code != checkCritical || !strings.Contains(stdout, "no live node in the fleet") {
		t.Errorf("an empty fleet: exit %d, %q; want 2", code, stdout)
	}
	// A member, as fleet.Join records one, that never claims its daemon.
	e, err := election.NewElection(context.Background(), "ghost", "fleet.node.ghost", kv, election.WithoutSplay(),
		election.WithMetadata(map[string]string{"capacity": "1", "daemons": "orphan"}))
	if err != nil {
		t.Fatal(err)
	}
	startUntilCleanup(t, e)
	testenv.Eventually(t, "the ghost member", e2e.WaitTimeout, e.IsLeader)
	testenv.Poll(t, "CRITICAL: the orphan daemon runs nowhere", e2e.WaitTimeout, func() (string, bool) {
		code, stdout, _ := runCLI(t, "check", "-s", url, "--bucket", "FLEET", "--fleet")
		return stdout, code == checkCritical && strings.Contains(stdout, "Crit:daemon orphan runs nowhere") &&
			strings.Contains(stdout, "'fleet_daemons_stopped'=1")
	})
}

// startUntilCleanup runs e's campaign until the test ends.
func startUntilCleanup(t *testing.T, e *election.Election) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}
