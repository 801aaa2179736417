package cli

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
)

// startDemo starts the demo with workers workers logging JSON, on a
// configuration of its own (no NATS URL or context: its embedded server),
// and returns it with its log.
func startDemo(t *testing.T, bin string, workers int) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "NATS_URL=", "NATS_CONTEXT=", "CONTEXT=",
		"WORKERS="+strconv.Itoa(workers), "LOG_FORMAT=json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stderr
}

// TestDemoStopsOnASignalDuringSetUp sends SIGINT to the demo as soon as its
// server is up, while it sets up a thousand workers: it stops, and exits 0,
// rather than finishing the set-up first or swallowing the signal.
func TestDemoStopsOnASignalDuringSetUp(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	cmd, stderr := startDemo(t, bin, 1000)
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := bufio.NewScanner(stderr)
	var log []string
	for lines.Scan() {
		log = append(log, lines.Text())
		if strings.Contains(lines.Text(), "started an embedded nats-server") {
			cmd.Process.Signal(syscall.SIGINT)
			break
		}
	}
	for lines.Scan() {
		log = append(log, lines.Text())
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("demo exited with %v after SIGINT, want 0:\n%s", err, strings.Join(log, "\n"))
		}
	case <-time.After(e2e.WaitTimeout):
		t.Fatalf("demo still runs %v after SIGINT:\n%s", e2e.WaitTimeout, strings.Join(log, "\n"))
	}
	all := strings.Join(log, "\n")
	if !strings.Contains(all, "stopped during set-up") && !strings.Contains(all, "all workers stopped") {
		t.Errorf("demo did not say it stopped:\n%s", all)
	}
	if strings.Count(all, `"event":"won"`) > 1 {
		t.Errorf("more than one win logged:\n%s", all)
	}
}
