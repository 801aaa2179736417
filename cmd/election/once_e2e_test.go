//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRunOnceFiredOnTenHostsRunsTheJobOnce fires election run --once for the
// same job on ten processes: five at the same moment, then five more after
// the job ran (a schedule firing a little later on other hosts). The job
// runs exactly once; every other process exits 75 without running it.
func TestRunOnceFiredOnTenHostsRunsTheJobOnce(t *testing.T) {
	t.Parallel()
	bin := buildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	// A TTL that comfortably covers the later five processes' start-up.
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CRON", TTL: 10 * time.Second})
	runs := filepath.Join(t.TempDir(), "runs")
	job := []string{"sh", "-c", `echo "$KVELECT_LEADER $KVELECT_TOKEN" >> ` + runs}
	fire := func(from, to int) []*daemon {
		var ds []*daemon
		for i := from; i < to; i++ {
			ds = append(ds, startDaemon(t, bin, fmt.Sprintf("host%d", i),
				append([]string{"--server", s.ClientURL(), "--bucket", "CRON", "--key", "nightly", "--once", "--"}, job...)...))
		}
		return ds
	}
	codes := map[int]int{}
	for _, d := range fire(0, 5) {
		codes[d.wait(t)]++
	}
	for _, d := range fire(5, 10) {
		if code := d.wait(t); code != exitSkipped {
			t.Errorf("a process fired after the job ran exited %d, want %d; its log:\n%s", code, exitSkipped, d.logged(t))
		}
	}
	if codes[0] != 1 || codes[exitSkipped] != 4 {
		t.Errorf("the first five exited with %v; want one 0 and four %d", codes, exitSkipped)
	}
	data, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 1 {
		t.Errorf("the job ran %d times: %q", len(lines), data)
	}
}

// TestRunOnceExitsWithTheJobsStatus checks that the process that runs the
// job exits with the job's status, and that --wait needs --once.
func TestRunOnceExitsWithTheJobsStatus(t *testing.T) {
	t.Parallel()
	bin := buildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CRON", TTL: 2 * time.Second})
	d := startDaemon(t, bin, "solo", "--server", s.ClientURL(), "--bucket", "CRON", "--key", "failing", "--once", "--", "sh", "-c", "exit 3")
	if code := d.wait(t); code != 3 {
		t.Errorf("election run --once exited %d, want the job's 3; its log:\n%s", code, d.logged(t))
	}
	d = startDaemon(t, bin, "solo", "--server", s.ClientURL(), "--bucket", "CRON", "--key", "waiting", "--wait", "1s", "--", "true")
	if code := d.wait(t); code != exitUsage {
		t.Errorf("--wait without --once exited %d, want %d", code, exitUsage)
	}
}
