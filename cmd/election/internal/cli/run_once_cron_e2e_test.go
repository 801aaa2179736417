//go:build linux

package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// cronBucket makes the bucket CRON with the TTL and a leadership history,
// as election bucket create does, and returns the server's URL and the
// bucket.
func cronBucket(t *testing.T, ttl time.Duration) (string, jetstream.KeyValue) {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CRON", TTL: ttl})
	if _, err := history.Create(context.Background(), js, "CRON", 0); err != nil {
		t.Fatal(err)
	}
	return s.ClientURL(), kv
}

// jobScript is a job that logs its start and end, with its name and
// status, to the file runs, and runs for a moment in between so that two
// runs at once would interleave there; it fails with status 3 on the first
// host that runs it (the one that makes the directory first).
func jobScript(dir string) []string {
	return []string{"sh", "-c", fmt.Sprintf(`
echo "start $KVELECT_LEADER" >> %[1]s/runs
status=0
if mkdir %[1]s/failed 2>/dev/null; then status=3; fi
sleep 0.3
echo "end $KVELECT_LEADER $status" >> %[1]s/runs
exit $status`, dir)}
}

// runsOf reads the runs a jobScript logged: each as "NAME STATUS", in
// order; it fails the test if two runs overlapped.
func runsOf(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	running := ""
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		switch {
		case f[0] == "start" && running == "":
			running = f[1]
		case f[0] == "end" && running == f[1]:
			runs = append(runs, f[1]+" "+f[2])
			running = ""
		default:
			t.Fatalf("two runs at once: %q in\n%s", line, data)
		}
	}
	if running != "" {
		t.Fatalf("the run of %s never ended:\n%s", running, data)
	}
	return runs
}

// TestRunOnceRetriesAFailedJobOnAnotherHost fires the same job on three
// hosts at once, each with --wait 30s; the job fails on the first host that
// runs it. It runs again on another host and succeeds: exactly two runs,
// never at once; the host that failed exits with the job's status, the one
// that succeeded 0, the third 75; the history shows both runs with their
// statuses.
func TestRunOnceRetriesAFailedJobOnAnotherHost(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	url, _ := cronBucket(t, 10*time.Second)
	dir := t.TempDir()
	var ds []*e2e.Process
	for i := range 3 {
		ds = append(ds, e2e.PrepareProcess(t, bin, fmt.Sprintf("host%d", i), append([]string{"run", "--name", fmt.Sprintf("host%d", i), "--log-format", "json",
			"--server", url, "--bucket", "CRON", "--key", "nightly", "--once", "--wait", "30s", "--"}, jobScript(dir)...)...))
	}
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Go(func() {
			if err := d.Start(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	codes := map[string]int{}
	for i, d := range ds {
		codes[fmt.Sprintf("host%d", i)] = d.Wait(t)
	}
	runs := runsOf(t, dir)
	if len(runs) != 2 || !strings.HasSuffix(runs[0], " 3") || !strings.HasSuffix(runs[1], " 0") {
		t.Fatalf("the job's runs: %q; want one that failed (3), then one that succeeded (0); exit codes %v", runs, codes)
	}
	failed, succeeded := strings.Fields(runs[0])[0], strings.Fields(runs[1])[0]
	for name, code := range codes {
		want := ExitSkipped
		switch name {
		case failed:
			want = 3
		case succeeded:
			want = 0
		}
		if code != want {
			t.Errorf("%s exited %d, want %d (%s failed, %s succeeded)", name, code, want, failed, succeeded)
		}
	}

	code, stdout, stderr := runCLI(t, "history", "-s", url, "--bucket", "CRON", "--key", "nightly")
	if code != 0 {
		t.Fatalf("history: exit %d, %s", code, stderr)
	}
	t.Logf("election history --key nightly:\n%s", stdout)
	var ran []string
	for _, line := range strings.Split(stdout, "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[3] == "ran" {
			ran = append(ran, line)
		}
	}
	if len(ran) != 2 || !strings.Contains(ran[0], failed) || !strings.Contains(ran[0], "status 3") ||
		!strings.Contains(ran[1], succeeded) || !strings.Contains(ran[1], "status 0") {
		t.Errorf("the history's runs:\n%s\nwant %s's with status 3, then %s's with status 0; all of it:\n%s",
			strings.Join(ran, "\n"), failed, succeeded, stdout)
	}
}

// TestRunOnceDoneForOutlastsTheTTL runs a job with --done-for 1h on a bucket
// of TTL 10 s; a host firing 20 s later, when the key's own mark has long
// aged out, exits 75 without running it, and so does one without
// --done-for (the mark carries its own lifetime).
func TestRunOnceDoneForOutlastsTheTTL(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	url, kv := cronBucket(t, 10*time.Second)
	dir := t.TempDir()
	fire := func(name string, flags ...string) int {
		d := e2e.StartDaemon(t, bin, name, append(append([]string{"--server", url, "--bucket", "CRON", "--key", "nightly", "--once"}, flags...),
			append([]string{"--"}, jobScript(dir)...)...)...)
		code := d.Wait(t)
		t.Logf("%s exited %d:\n%s", name, code, d.Logged(t))
		return code
	}
	if code := fire("host0", "--done-for", "1h"); code != 3 {
		t.Fatalf("the first run exited %d, want the job's 3", code) // jobScript fails its first run
	}
	if code := fire("host1", "--done-for", "1h"); code != 0 {
		t.Fatalf("the retry exited %d, want 0", code)
	}
	ranAt := time.Now()
	testenv.Eventually(t, "the key's own done mark to age out", 30*time.Second, func() bool {
		_, err := kv.Get(context.Background(), "nightly")
		return err != nil
	})
	time.Sleep(time.Until(ranAt.Add(20 * time.Second))) // the schedule fires 20 s after the run
	if code := fire("host2", "--done-for", "1h"); code != ExitSkipped {
		t.Errorf("a host firing 20 s after the successful run exited %d, want %d", code, ExitSkipped)
	}
	if code := fire("host3"); code != ExitSkipped {
		t.Errorf("a host without --done-for firing after it exited %d, want %d", code, ExitSkipped)
	}
	if runs := runsOf(t, dir); !slices.Equal(runs, []string{"host0 3", "host1 0"}) {
		t.Errorf("the job's runs: %q; want host0's failure and host1's success only", runs)
	}
	// The skipped hosts never claimed the key: the history shows no win,
	// token or stand-down of theirs, as if they had led.
	code, stdout, stderr := runCLI(t, "history", "-s", url, "--bucket", "CRON", "--key", "nightly")
	if code != 0 || !regexp.MustCompile(`ran +host1 .*status 0 `).MatchString(stdout) || regexp.MustCompile(`host[23]`).MatchString(stdout) {
		t.Errorf("history: exit %d, %s%s; want host1's run, and nothing of host2 and host3, which skipped the job", code, stdout, stderr)
	}
}

// TestRunOnceNoRetryMarksAFailedJobDone: with --no-retry, a job that fails
// (status 3) marks the key done all the same: its host exits 3, and the
// next host to fire exits 75 without running it.
func TestRunOnceNoRetryMarksAFailedJobDone(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	url, _ := cronBucket(t, 10*time.Second)
	dir := t.TempDir()
	job := []string{"sh", "-c", fmt.Sprintf(`echo "$KVELECT_LEADER" >> %s/ran; exit 3`, dir)}
	fire := func(name string, flags ...string) int {
		d := e2e.StartDaemon(t, bin, name, append(append([]string{"--server", url, "--bucket", "CRON", "--key", "nightly", "--once"}, flags...),
			append([]string{"--"}, job...)...)...)
		code := d.Wait(t)
		t.Logf("%s exited %d:\n%s", name, code, d.Logged(t))
		return code
	}
	if code := fire("host0", "--no-retry"); code != 3 {
		t.Fatalf("the failing job with --no-retry exited %d, want the job's 3", code)
	}
	if code := fire("host1"); code != ExitSkipped {
		t.Errorf("the next host exited %d, want %d: the failed run marked the job done", code, ExitSkipped)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "ran")); err != nil || string(data) != "host0\n" {
		t.Errorf("the job ran on %q (%v); want host0 alone", data, err)
	}
	code, stdout, stderr := runCLI(t, "history", "-s", url, "--bucket", "CRON", "--key", "nightly")
	if code != 0 || !regexp.MustCompile(`ran +host0 .*status 3 `).MatchString(stdout) {
		t.Errorf("history: exit %d, %s%s; want host0's run with status 3", code, stdout, stderr)
	}
}

// TestRunOnceToldToStopReleasesTheJob: election run --once stopped by
// SIGTERM while its job runs passes the signal on, exits with the job's
// status (143) and leaves the key unmarked: a host waiting with --wait runs
// the job. The history records the stopped run as interrupted by the stop.
func TestRunOnceToldToStopReleasesTheJob(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	url, _ := cronBucket(t, 10*time.Second)
	dir := t.TempDir()
	job := []string{"sh", "-c", fmt.Sprintf(`
if mkdir %[1]s/first 2>/dev/null; then touch %[1]s/started; sleep 60 & wait; exit 9; fi
echo "$KVELECT_LEADER" >> %[1]s/ran`, dir)}
	first := e2e.StartDaemon(t, bin, "first", append([]string{"--server", url, "--bucket", "CRON", "--key", "nightly", "--once", "--"}, job...)...)
	testenv.Eventually(t, "the first host's job to start", e2e.WaitTimeout, func() bool {
		_, err := os.Stat(filepath.Join(dir, "started"))
		return err == nil
	})
	second := e2e.StartDaemon(t, bin, "second", append([]string{"--server", url, "--bucket", "CRON", "--key", "nightly", "--once", "--wait", "30s", "--"}, job...)...)
	testenv.Eventually(t, "the second host to wait for the key", e2e.WaitTimeout, func() bool {
		return strings.Contains(second.Logged(t), "trying once")
	})
	if err := first.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := first.Wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("the host told to stop exited %d, want %d (its job's, killed by SIGTERM); its log:\n%s", code, 128+int(syscall.SIGTERM), first.Logged(t))
	}
	if code := second.Wait(t); code != 0 {
		t.Errorf("the waiting host exited %d, want 0; its log:\n%s", code, second.Logged(t))
	}
	if data, err := os.ReadFile(filepath.Join(dir, "ran")); err != nil || string(data) != "second\n" {
		t.Errorf("the job's completed runs: %q (%v); want the second host's", data, err)
	}
	code, stdout, stderr := runCLI(t, "history", "-s", url, "--bucket", "CRON", "--key", "nightly")
	if code != 0 || !regexp.MustCompile(`ran +first .*status 143 .*election run was told to stop`).MatchString(stdout) ||
		!regexp.MustCompile(`ran +second .*status 0 `).MatchString(stdout) {
		t.Errorf("history: exit %d, %s%s; want first's run stopped with 143, then second's with 0", code, stdout, stderr)
	}
}
