package main

import (
	"bytes"
	"os/exec"
	"testing"

	"github.com/kvelect/election/cmd/election/internal/cli"
	"github.com/kvelect/election/cmd/election/internal/e2e"
)

// The tests of this package run election as a user runs it; the commands'
// own tests, end-to-end ones included, are internal/cli's. These are the
// names the tests here use for e2e's helpers.

// TestMain runs the tests, or the guard of a COMMAND when a test's election
// run starts this test binary again as its guard.
func TestMain(m *testing.M) { e2e.Main(m, cli.ConnEnv()) }

// Exit statuses of election.
const (
	exitError = cli.ExitError
	exitUsage = cli.ExitUsage
)

// waitTimeout bounds every wait of the tests.
const waitTimeout = e2e.WaitTimeout

// runCLI runs election with args in this process and returns its exit code
// and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// wantOneLineError checks that a command failed with code and said, on one
// line of stderr, each of says.
func wantOneLineError(t *testing.T, code, wantCode int, stdout, stderr string, says ...string) {
	t.Helper()
	e2e.WantOneLineError(t, code, wantCode, stdout, stderr, says...)
}

// buildElection builds this command once for the run.
func buildElection(t *testing.T) string {
	t.Helper()
	return e2e.BuildElection(t)
}

// daemon is an election process of a test.
type daemon struct {
	*e2e.Process
	cmd *exec.Cmd
}

func (d *daemon) wait(t *testing.T) int {
	t.Helper()
	return d.Wait(t)
}

// startDaemon starts bin run with args (e2e.StartDaemon).
func startDaemon(t *testing.T, bin, name string, args ...string) *daemon {
	t.Helper()
	p := e2e.StartDaemon(t, bin, name, args...)
	return &daemon{p, p.Cmd}
}

// start is one start of a recording command (e2e.Started).
type start struct {
	name  string
	token uint64
	pid   int
}

func starts(recorded []e2e.Started) []start {
	out := make([]start, len(recorded))
	for i, s := range recorded {
		out[i] = start{s.Name, s.Token, s.PID}
	}
	return out
}

// waitStarts polls file until it records n starts (e2e.WaitStarts).
func waitStarts(t *testing.T, file string, n int) []start {
	t.Helper()
	return starts(e2e.WaitStarts(t, file, n))
}

// parseStarts returns the starts recorded in data (e2e.ParseStarts).
func parseStarts(data []byte) []start { return starts(e2e.ParseStarts(data)) }

// waitDead waits until process pid has gone.
func waitDead(t *testing.T, pid int) {
	t.Helper()
	e2e.WaitDead(t, pid)
}
