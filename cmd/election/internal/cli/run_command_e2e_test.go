//go:build linux

package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// recordedStarts returns a file for recordingCommand's starts, and that
// command; every start it records that still runs is killed when the test
// ends.
func recordedStarts(t *testing.T) (file string, command []string) {
	file = filepath.Join(t.TempDir(), "starts")
	killStartedCommands(t, file)
	return file, e2e.RecordingCommand(file)
}

// killStartedCommands kills, when the test ends, every command recorded in
// file that still runs, so that no test leaves processes behind even if
// election run failed to stop them (the test then fails on waitDead first).
func killStartedCommands(t *testing.T, file string) {
	t.Cleanup(func() {
		data, _ := os.ReadFile(file)
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var s e2e.Started
			if _, err := fmt.Sscan(line, &s.Name, &s.Token, &s.PID); err == nil && testenv.Alive(s.PID) {
				syscall.Kill(s.PID, syscall.SIGKILL)
			}
		}
	})
}

// TestRunMovesTheCommandBetweenProcesses runs election run in three
// processes: one runs the command; when its election process is killed the
// command moves to another, with a larger token; when that one gets SIGTERM
// it stops its command, releases the key and exits with the command's status,
// and the third takes over.
func TestRunMovesTheCommandBetweenProcesses(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2E", TTL: 2 * time.Second})
	starts, cmd := recordedStarts(t)
	daemons := map[string]*e2e.Process{}
	for i := range 3 {
		name := fmt.Sprintf("node%d", i)
		daemons[name] = e2e.StartDaemon(t, bin, name,
			"--server", s.ClientURL(), "--bucket", "E2E", "--key", "job", "--grace", "5s", "--", cmd[0], cmd[1], cmd[2])
	}

	first := e2e.WaitStarts(t, starts, 1)[0]
	if first.Key != "job" || first.Bucket != "E2E" || first.Token == 0 || daemons[first.Name] == nil {
		t.Fatalf("first start %+v: want the key job, the bucket E2E, a token and a node's name", first)
	}

	// SIGKILL: the kernel kills the command; the key expires after its TTL.
	daemons[first.Name].Cmd.Process.Kill()
	daemons[first.Name].Wait(t)
	e2e.WaitDead(t, first.PID)
	second := e2e.WaitStarts(t, starts, 2)[1]
	if second.Name == first.Name || second.Token <= first.Token {
		t.Fatalf("after killing %s (token %d), the command started on %s with token %d; want another node, a larger token",
			first.Name, first.Token, second.Name, second.Token)
	}

	// SIGTERM: passed to the command, which dies of it; the key is released.
	leader := daemons[second.Name]
	leader.Cmd.Process.Signal(syscall.SIGTERM)
	if code := leader.Wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("election run exited %d after SIGTERM, want the command's status %d", code, 128+int(syscall.SIGTERM))
	}
	e2e.WaitDead(t, second.PID)
	wantLogged(t, leader.Logged(t), "passing the signal to the command", "the command stopped; releasing the key", "released the key")
	third := e2e.WaitStarts(t, starts, 3)[2]
	if third.Name == first.Name || third.Name == second.Name || third.Token <= second.Token {
		t.Fatalf("after SIGTERM to %s (token %d), the command started on %s with token %d; want the third node, a larger token",
			second.Name, second.Token, third.Name, third.Token)
	}
	if all := e2e.WaitStarts(t, starts, 3); len(all) != 3 {
		t.Errorf("the command started %d times, want 3: %+v", len(all), all)
	}
}

// TestRunRestartsTheCommandWhenItLeadsAgain deletes the leader's key: it
// loses leadership, stops its command, campaigns on, wins again and starts
// the command again with a larger token.
func TestRunRestartsTheCommandWhenItLeadsAgain(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2E", TTL: 2 * time.Second})
	starts, cmd := recordedStarts(t)
	d := e2e.StartDaemon(t, bin, "solo", "--server", s.ClientURL(), "--bucket", "E2E", "--key", "again", "--", cmd[0], cmd[1], cmd[2])

	first := e2e.WaitStarts(t, starts, 1)[0]
	if err := kv.Delete(context.Background(), "again"); err != nil {
		t.Fatal(err)
	}
	e2e.WaitDead(t, first.PID)
	second := e2e.WaitStarts(t, starts, 2)[1]
	if second.Name != "solo" || second.Token <= first.Token {
		t.Fatalf("second start %+v after token %d: want solo again with a larger token", second, first.Token)
	}
	wantLogged(t, d.Logged(t), "leadership ended: stopping the command", "the command stopped; campaigning again")

	d.Cmd.Process.Signal(syscall.SIGINT)
	if code := d.Wait(t); code != 128+int(syscall.SIGINT) {
		t.Errorf("election run exited %d after SIGINT, want the command's status %d", code, 128+int(syscall.SIGINT))
	}
	e2e.WaitDead(t, second.PID)
}

// TestRunKillsACommandThatIgnoresSIGTERM checks that a command that ignores
// the signal passed to it gets SIGKILL after the grace period.
func TestRunKillsACommandThatIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2E", TTL: 2 * time.Second})
	starts := filepath.Join(t.TempDir(), "starts")
	killStartedCommands(t, starts)
	stubborn := `trap "" TERM; echo "$KVELECT_LEADER $KVELECT_TOKEN $$ $KVELECT_KEY $KVELECT_BUCKET" >> ` + starts + `; while :; do sleep 1; done`
	d := e2e.StartDaemon(t, bin, "solo", "--server", s.ClientURL(), "--bucket", "E2E", "--key", "stubborn", "--grace", "200ms", "--", "sh", "-c", stubborn)

	first := e2e.WaitStarts(t, starts, 1)[0]
	d.Cmd.Process.Signal(syscall.SIGTERM)
	if code := d.Wait(t); code != 128+int(syscall.SIGKILL) {
		t.Errorf("election run exited %d, want %d: the command killed by SIGKILL", code, 128+int(syscall.SIGKILL))
	}
	e2e.WaitDead(t, first.PID)
	wantLogged(t, d.Logged(t), "passing the signal to the command", "released the key")
}

// TestRunLogsTheServerGoingAwayAndComingBack resets election run's
// connection: it logs the loss once and the reconnection once.
func TestRunLogsTheServerGoingAwayAndComingBack(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2E", TTL: 2 * time.Second})
	p, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	starts, cmd := recordedStarts(t)
	d := e2e.StartDaemon(t, bin, "solo", "--server", p.URL(), "--bucket", "E2E", "--key", "blip", "--", cmd[0], cmd[1], cmd[2])
	first := e2e.WaitStarts(t, starts, 1)[0]
	p.Reset()
	testenv.Eventually(t, "the loss and the reconnection in the log", e2e.WaitTimeout, func() bool {
		log := d.Logged(t)
		return strings.Contains(log, "lost the connection to the NATS server") && strings.Contains(log, "reconnected to the NATS server")
	})
	d.Cmd.Process.Signal(syscall.SIGTERM)
	d.Wait(t)
	e2e.WaitDead(t, first.PID)
	if log := d.Logged(t); strings.Count(log, "lost the connection") != 1 || strings.Count(log, "reconnected to") != 1 {
		t.Errorf("want one line for the loss and one for the reconnection:\n%s", log)
	}
}

// TestALoneRunStartsItsCommandAtOnce: a lone election run on a free key
// of a 10 s bucket (whose start delay, were it applied, could be 5 s)
// runs its command within a second of starting, connection and all.
func TestALoneRunStartsItsCommandAtOnce(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LONE", TTL: 10 * time.Second})
	starts, cmd := recordedStarts(t)
	began := time.Now()
	e2e.StartDaemon(t, bin, "lone", "--server", s.ClientURL(), "--bucket", "LONE", "--key", "job", "--", cmd[0], cmd[1], cmd[2])
	e2e.WaitStarts(t, starts, 1)
	took := time.Since(began)
	t.Logf("election run started to its command running: %v", took)
	if took > time.Second {
		t.Errorf("a lone election run started its command %v after it began, want within a second", took)
	}
}
