package cli

import (
	"bufio"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
)

// TestEveryDemoWorkerLogsThatItCampaigns runs the demo with three workers:
// each logs "campaigning" (event campaign) once it campaigns, not only the
// one that finds the key free and claims it; then SIGINT stops the demo,
// which exits 0.
func TestEveryDemoWorkerLogsThatItCampaigns(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	cmd, stderr := startDemo(t, bin, 3)
	lines := make(chan string)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait() // after the end of the output: Wait closes the pipe
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		for range lines { // what the test did not read, up to the end
		}
	})
	campaigning := map[string]bool{}
	var log []string
	timeout := time.After(e2e.WaitTimeout)
	for len(campaigning) < 3 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the demo ended its output:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, line)
			var entry struct{ Worker, Event, Msg string }
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Event == "campaign" && entry.Msg == "campaigning" {
				campaigning[entry.Worker] = true
			}
		case <-timeout:
			t.Fatalf("after %v, %d workers logged that they campaign, want 3:\n%s", e2e.WaitTimeout, len(campaigning), strings.Join(log, "\n"))
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	go func() {
		for range lines { // the rest, to the end of the output
		}
	}()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("demo exited with %v after SIGINT, want 0", err)
		}
	case <-time.After(e2e.WaitTimeout):
		t.Fatalf("demo still runs %v after SIGINT", e2e.WaitTimeout)
	}
}
