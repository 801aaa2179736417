package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/history"
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

// TestCheckSaysHowLongAJobsMarkLasts: check --key on a job's key just
// marked done by run --once --done-for 1h says the mark lasts until the
// end the history records, an hour on, not the key's TTL; to a user who
// may not read the history it says "until at least" the key's own mark's
// end, and why it cannot tell more.
func TestCheckSaysHowLongAJobsMarkLasts(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second // the key's mark stands while the checks run
	perms, err := rolePermissions(roleObserver, "MARKS", "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	user, root := roleServer(t, perms.serverBlock())
	_, js := testenv.Connect(t, root)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "MARKS", TTL: ttl})
	if _, err := history.Create(context.Background(), js, "MARKS", 0); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "run", "-s", root, "--bucket", "MARKS", "--key", "nightly", "--name", "host1", "--once", "--done-for", "1h", "--", "true"); code != 0 {
		t.Fatalf("run --once --done-for 1h: exit %d:\n%s", code, stderr)
	}
	e, err := kv.Get(context.Background(), "nightly")
	if err != nil {
		t.Fatal(err)
	}
	at := e.Created().UTC()
	until := regexp.MustCompile(`done by host1 at (\S+), until (\S+) `)

	code, stdout, _ := runCLI(t, "check", "-s", root, "--bucket", "MARKS", "--key", "nightly")
	t.Logf("check: %s", stdout)
	m := until.FindStringSubmatch(stdout)
	if code != checkOK || m == nil {
		t.Fatalf("check: exit %d, %q; want OK, done by host1 at ..., until ...", code, stdout)
	}
	end, err := time.Parse(time.RFC3339, m[2])
	if err != nil || end.Sub(at) < time.Hour-time.Second || end.Sub(at) > time.Hour+time.Minute {
		t.Errorf("check says the mark of %s lasts until %s (%v), want an hour on (--done-for 1h), not a TTL", at.Format(time.RFC3339), m[2], err)
	}

	code, stdout, _ = runCLI(t, "check", "-s", user, "--user", roleUser, "--password", secret, "--bucket", "MARKS", "--key", "nightly")
	t.Logf("check, history not readable: %s", stdout)
	want := "done by host1 at " + at.Format(time.RFC3339) + ", until at least " + at.Add(ttl).Format(time.RFC3339) + " (the key's own mark; the history, which records a longer --done-for, cannot be read: permission denied"
	if code != checkOK || !strings.Contains(stdout, want) {
		t.Errorf("check as a user who may not read the history: exit %d, %q; want OK saying %q", code, stdout, want)
	}

	// The key's own mark gone (as once it ages out): the history's still
	// stands, and nobody has to lead the key.
	if err := kv.Purge(context.Background(), "nightly"); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = runCLI(t, "check", "-s", root, "--bucket", "MARKS", "--key", "nightly")
	t.Logf("check, the key's mark gone: %s", stdout)
	if m := until.FindStringSubmatch(stdout); code != checkOK || m == nil || m[2] != end.Format(time.RFC3339) {
		t.Errorf("check once the key's own mark is gone: exit %d, %q; want OK, done by host1 until %s", code, stdout, end.Format(time.RFC3339))
	}
}
