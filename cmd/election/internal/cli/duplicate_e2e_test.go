//go:build linux

package cli

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestASecondCandidateOfALiveNameExitsAtOnce runs election run, sidecar
// and agent under the name of a live process of the same command: each
// exits 1 within 5 s with one line naming the duplicate, both processes
// (their pids and connections) and the key, and the first runs on, its
// record untouched. The second sidecar's /healthz is never ok: the record
// under its name is another's.
func TestASecondCandidateOfALiveNameExitsAtOnce(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2E", TTL: 2 * time.Second})
	b, err := election.OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	host, _ := os.Hostname()
	conn := []string{"--server", s.ClientURL(), "--bucket", "E2E", "--log-format", "json"}
	for _, c := range []struct {
		command, key, says string
		args               []string
	}{
		{"run", "job", `election run: duplicate candidate name: key "job": candidate "twin" already runs as`,
			[]string{"--key", "job", "--", "sleep", "1000"}},
		{"sidecar", "side", `election sidecar: duplicate candidate name: key "side": candidate "twin" already runs as`,
			[]string{"--key", "side", "--listen", "127.0.0.1:0"}},
		{"agent", "fleet.node.twin", `election agent: fleet: node name live elsewhere: node "twin" already runs as`,
			[]string{"--daemon", "d=sleep 1000"}},
	} {
		t.Run(c.command, func(t *testing.T) {
			args := append(append([]string{c.command, "--name", "twin"}, conn...), c.args...)
			first := e2e.StartProcess(t, bin, "first-"+c.command, args...)
			testenv.Poll(t, "the first "+c.command+"'s candidate record", e2e.WaitTimeout, func() ([]election.Candidate, bool) {
				cs, _ := b.Candidates(context.Background(), c.key)
				return cs, slices.ContainsFunc(cs, func(cand election.Candidate) bool { return cand.Writer.PID == first.Cmd.Process.Pid })
			})

			started := time.Now()
			second := e2e.StartProcess(t, bin, "second-"+c.command, args...)
			var healthOK atomic.Bool
			if c.command == "sidecar" {
				stopPolling := pollHealth(t, second, &healthOK)
				defer stopPolling()
			}
			select {
			case <-second.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("the second %s still runs 5 s after it started:\n%s", c.command, second.Logged(t))
			}
			log := second.Logged(t)
			if second.ExitCode() != ExitError {
				t.Errorf("the second %s exited %d after %v, want %d:\n%s", c.command, second.ExitCode(), time.Since(started), ExitError, log)
			}
			if healthOK.Load() {
				t.Errorf("the second sidecar's /healthz answered ok while another held its name:\n%s", log)
			}
			line := lineWith(log, c.says)
			connection := fmt.Sprintf(`(connection "election %s twin", client `, c.command)
			for _, says := range []string{
				fmt.Sprintf("already runs as %s pid %d %s", host, first.Cmd.Process.Pid, connection),
				fmt.Sprintf("refused this one, %s pid %d %s", host, second.Cmd.Process.Pid, connection),
			} {
				if !strings.Contains(line, says) {
					t.Errorf("the second %s's line %q does not say %q; its log:\n%s", c.command, line, says, log)
				}
			}
			select {
			case <-first.Done():
				t.Fatalf("the first %s exited %d:\n%s", c.command, first.ExitCode(), first.Logged(t))
			default:
			}
			cs, err := b.Candidates(context.Background(), c.key)
			if err != nil || len(cs) != 1 || cs[0].Writer.PID != first.Cmd.Process.Pid {
				t.Errorf("after the second %s exited, the candidates of %s are %+v (%v), want the first's alone", c.command, c.key, cs, err)
			}
		})
	}
}

// lineWith returns the line of log that contains s, or "" if none does.
func lineWith(log, s string) string {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
