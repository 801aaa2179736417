//go:build linux

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRunOnceFiredOnTenHostsRunsTheJobOnce fires election run --once for the
// same job on ten processes: five at the same moment, then five more after
// the job ran (a schedule firing a little later on other hosts). The job
// runs exactly once; every other process exits 75 without running it.
func TestRunOnceFiredOnTenHostsRunsTheJobOnce(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	// A TTL that comfortably covers the later five processes' start-up.
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CRON", TTL: 10 * time.Second})
	runs := filepath.Join(t.TempDir(), "runs")
	job := []string{"sh", "-c", `echo "$KVELECT_LEADER $KVELECT_TOKEN" >> ` + runs}
	fire := func(from, to int) []*e2e.Process {
		var ds []*e2e.Process
		for i := from; i < to; i++ {
			ds = append(ds, e2e.StartDaemon(t, bin, fmt.Sprintf("host%d", i),
				append([]string{"--server", s.ClientURL(), "--bucket", "CRON", "--key", "nightly", "--once", "--"}, job...)...))
		}
		return ds
	}
	codes := map[int]int{}
	for _, d := range fire(0, 5) {
		codes[d.Wait(t)]++
	}
	for _, d := range fire(5, 10) {
		if code := d.Wait(t); code != ExitSkipped {
			t.Errorf("a process fired after the job ran exited %d, want %d; its log:\n%s", code, ExitSkipped, d.Logged(t))
		}
	}
	if codes[0] != 1 || codes[ExitSkipped] != 4 {
		t.Errorf("the first five exited with %v; want one 0 and four %d", codes, ExitSkipped)
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
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CRON", TTL: 2 * time.Second})
	d := e2e.StartDaemon(t, bin, "solo", "--server", s.ClientURL(), "--bucket", "CRON", "--key", "failing", "--once", "--", "sh", "-c", "exit 3")
	if code := d.Wait(t); code != 3 {
		t.Errorf("election run --once exited %d, want the job's 3; its log:\n%s", code, d.Logged(t))
	}
	d = e2e.StartDaemon(t, bin, "solo", "--server", s.ClientURL(), "--bucket", "CRON", "--key", "waiting", "--wait", "1s", "--", "true")
	if code := d.Wait(t); code != ExitUsage {
		t.Errorf("--wait without --once exited %d, want %d", code, ExitUsage)
	}
}
