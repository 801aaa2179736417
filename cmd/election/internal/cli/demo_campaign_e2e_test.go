package cli

import (
	"bufio"
	"encoding/json"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
)

// TestEveryDemoWorkerLogsThatItCampaigns runs the demo with three workers:
// each logs "campaigning" (event campaign) once it campaigns, not only the
// one that finds the key free and claims it; the commands the log offers
// to try name the demo's server (checkDemoHints); then SIGINT stops the
// demo, which exits 0.
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
	checkDemoHints(t, log)
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

// checkDemoHints checks the commands the demo's log offers to try from
// another terminal: election status, history and resign, each with -s and
// the URL of the demo's server (the default server is another), and no
// command of the nats CLI; the status and history it offers run.
func checkDemoHints(t *testing.T, log []string) {
	t.Helper()
	var url string
	for _, line := range log {
		var entry struct{ URL string }
		if json.Unmarshal([]byte(line), &entry) == nil && entry.URL != "" {
			url = entry.URL
			break
		}
	}
	if !regexp.MustCompile(`^nats://127\.0\.0\.1:\d+$`).MatchString(url) {
		t.Fatalf("no server URL (nats://127.0.0.1:PORT) in the demo's log:\n%s", strings.Join(log, "\n"))
	}
	all := strings.Join(log, "\n")
	for _, hint := range []string{
		"election status -s " + url + " --bucket DEMO_ELECTION",
		"election history -s " + url + " --bucket DEMO_ELECTION",
		"election resign -s " + url + " --bucket DEMO_ELECTION --key demo",
	} {
		if !strings.Contains(all, hint) {
			t.Errorf("the demo's log does not offer %q:\n%s", hint, all)
		}
	}
	if strings.Contains(all, "nats -s") || strings.Contains(all, "kv del") {
		t.Errorf("the demo's log offers a command of the nats CLI:\n%s", all)
	}
	// Once a worker won (after its start delay), both show the key.
	for _, args := range [][]string{{"status", "-s", url, "--bucket", "DEMO_ELECTION"}, {"history", "-s", url, "--bucket", "DEMO_ELECTION"}} {
		testenv.Poll(t, "election "+strings.Join(args, " ")+", as the demo offers, to show the key demo", e2e.WaitTimeout, func() (string, bool) {
			code, stdout, stderr := runCLI(t, args...)
			if code != ExitOK || stderr != "" {
				t.Fatalf("election %s, as the demo offers: exit %d, %q %q", strings.Join(args, " "), code, stdout, stderr)
			}
			return stdout, strings.Contains(stdout, "demo")
		})
	}
}
