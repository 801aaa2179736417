//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// start is one start of the command, as the command itself recorded it.
type start struct {
	name, key, bucket string
	token             uint64
	pid               int
}

// recordingCommand returns the arguments of a command that appends its
// start to file and then runs until it is stopped.
func recordingCommand(file string) []string {
	return []string{"sh", "-c", `echo "$KVELECT_LEADER $KVELECT_TOKEN $$ $KVELECT_KEY $KVELECT_BUCKET" >> ` + file + `; exec sleep 1000`}
}

// waitStarts polls file until it records n starts and returns them.
func waitStarts(t *testing.T, file string, n int) []start {
	t.Helper()
	var starts []start
	testenv.Poll(t, fmt.Sprintf("%d starts of the command", n), waitTimeout, func() (string, bool) {
		data, _ := os.ReadFile(file)
		starts = parseStarts(data)
		return fmt.Sprintf("%q", data), len(starts) >= n
	})
	return starts
}

// parseStarts returns the starts recorded in data.
func parseStarts(data []byte) []start {
	var starts []start
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var s start
		if _, err := fmt.Sscan(line, &s.name, &s.token, &s.pid, &s.key, &s.bucket); err == nil {
			starts = append(starts, s)
		}
	}
	return starts
}

// waitDead waits until process pid has gone.
func waitDead(t *testing.T, pid int) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("process %d to exit", pid), waitTimeout, func() bool { return !testenv.Alive(pid) })
}

// recordedStarts returns a file for recordingCommand's starts, and that
// command; every start it records that still runs is killed when the test
// ends.
func recordedStarts(t *testing.T) (file string, command []string) {
	file = filepath.Join(t.TempDir(), "starts")
	killStartedCommands(t, file)
	return file, recordingCommand(file)
}

// killStartedCommands kills, when the test ends, every command recorded in
// file that still runs, so that no test leaves processes behind even if
// election run failed to stop them (the test then fails on waitDead first).
func killStartedCommands(t *testing.T, file string) {
	t.Cleanup(func() {
		data, _ := os.ReadFile(file)
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var s start
			if _, err := fmt.Sscan(line, &s.name, &s.token, &s.pid); err == nil && testenv.Alive(s.pid) {
				syscall.Kill(s.pid, syscall.SIGKILL)
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
	bin := buildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2E", TTL: 2 * time.Second})
	starts, cmd := recordedStarts(t)
	daemons := map[string]*daemon{}
	for i := range 3 {
		name := fmt.Sprintf("node%d", i)
		daemons[name] = startDaemon(t, bin, name,
			"--server", s.ClientURL(), "--bucket", "E2E", "--key", "job", "--grace", "5s", "--", cmd[0], cmd[1], cmd[2])
	}

	first := waitStarts(t, starts, 1)[0]
	if first.key != "job" || first.bucket != "E2E" || first.token == 0 || daemons[first.name] == nil {
		t.Fatalf("first start %+v: want the key job, the bucket E2E, a token and a node's name", first)
	}

	// SIGKILL: the kernel kills the command; the key expires after its TTL.
	daemons[first.name].cmd.Process.Kill()
	daemons[first.name].wait(t)
	waitDead(t, first.pid)
	second := waitStarts(t, starts, 2)[1]
	if second.name == first.name || second.token <= first.token {
		t.Fatalf("after killing %s (token %d), the command started on %s with token %d; want another node, a larger token",
			first.name, first.token, second.name, second.token)
	}

	// SIGTERM: passed to the command, which dies of it; the key is released.
	leader := daemons[second.name]
	leader.cmd.Process.Signal(syscall.SIGTERM)
	if code := leader.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("election run exited %d after SIGTERM, want the command's status %d", code, 128+int(syscall.SIGTERM))
	}
	waitDead(t, second.pid)
	wantLogged(t, leader.logged(t), "passing the signal to COMMAND", "the command stopped; releasing the key", "released the key")
	third := waitStarts(t, starts, 3)[2]
	if third.name == first.name || third.name == second.name || third.token <= second.token {
		t.Fatalf("after SIGTERM to %s (token %d), the command started on %s with token %d; want the third node, a larger token",
			second.name, second.token, third.name, third.token)
	}
	if all := waitStarts(t, starts, 3); len(all) != 3 {
		t.Errorf("the command started %d times, want 3: %+v", len(all), all)
	}
}

// TestRunRestartsTheCommandWhenItLeadsAgain deletes the leader's key: it
// loses leadership, stops its command, campaigns on, wins again and starts
// the command again with a larger token.
func TestRunRestartsTheCommandWhenItLeadsAgain(t *testing.T) {
	t.Parallel()
	bin := buildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2E", TTL: 2 * time.Second})
	starts, cmd := recordedStarts(t)
	d := startDaemon(t, bin, "solo", "--server", s.ClientURL(), "--bucket", "E2E", "--key", "again", "--", cmd[0], cmd[1], cmd[2])

	first := waitStarts(t, starts, 1)[0]
	if err := kv.Delete(context.Background(), "again"); err != nil {
		t.Fatal(err)
	}
	waitDead(t, first.pid)
	second := waitStarts(t, starts, 2)[1]
	if second.name != "solo" || second.token <= first.token {
		t.Fatalf("second start %+v after token %d: want solo again with a larger token", second, first.token)
	}
	wantLogged(t, d.logged(t), "leadership ended: stopping COMMAND", "the command stopped; campaigning again")

	d.cmd.Process.Signal(syscall.SIGINT)
	if code := d.wait(t); code != 128+int(syscall.SIGINT) {
		t.Errorf("election run exited %d after SIGINT, want the command's status %d", code, 128+int(syscall.SIGINT))
	}
	waitDead(t, second.pid)
}

// TestRunKillsACommandThatIgnoresSIGTERM checks that a command that ignores
// the signal passed to it gets SIGKILL after the grace period.
func TestRunKillsACommandThatIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	bin := buildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2E", TTL: 2 * time.Second})
	starts := filepath.Join(t.TempDir(), "starts")
	killStartedCommands(t, starts)
	stubborn := `trap "" TERM; echo "$KVELECT_LEADER $KVELECT_TOKEN $$ $KVELECT_KEY $KVELECT_BUCKET" >> ` + starts + `; while :; do sleep 1; done`
	d := startDaemon(t, bin, "solo", "--server", s.ClientURL(), "--bucket", "E2E", "--key", "stubborn", "--grace", "200ms", "--", "sh", "-c", stubborn)

	first := waitStarts(t, starts, 1)[0]
	d.cmd.Process.Signal(syscall.SIGTERM)
	if code := d.wait(t); code != 128+int(syscall.SIGKILL) {
		t.Errorf("election run exited %d, want %d: the command killed by SIGKILL", code, 128+int(syscall.SIGKILL))
	}
	waitDead(t, first.pid)
	wantLogged(t, d.logged(t), "passing the signal to COMMAND", "released the key")
}

// TestRunLogsTheServerGoingAwayAndComingBack resets election run's
// connection: it logs the loss once and the reconnection once.
func TestRunLogsTheServerGoingAwayAndComingBack(t *testing.T) {
	t.Parallel()
	bin := buildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2E", TTL: 2 * time.Second})
	p, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	starts, cmd := recordedStarts(t)
	d := startDaemon(t, bin, "solo", "--server", p.URL(), "--bucket", "E2E", "--key", "blip", "--", cmd[0], cmd[1], cmd[2])
	first := waitStarts(t, starts, 1)[0]
	p.Reset()
	testenv.Eventually(t, "the loss and the reconnection in the log", waitTimeout, func() bool {
		log := d.logged(t)
		return strings.Contains(log, "lost the connection to the NATS server") && strings.Contains(log, "reconnected to the NATS server")
	})
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t)
	waitDead(t, first.pid)
	if log := d.logged(t); strings.Count(log, "lost the connection") != 1 || strings.Count(log, "reconnected to") != 1 {
		t.Errorf("want one line for the loss and one for the reconnection:\n%s", log)
	}
}

// TestALoneRunStartsItsCommandAtOnce: a lone election run on a free key
// of a 10 s bucket (whose start delay, were it applied, could be 5 s)
// runs its command within a second of starting, connection and all.
func TestALoneRunStartsItsCommandAtOnce(t *testing.T) {
	t.Parallel()
	bin := buildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LONE", TTL: 10 * time.Second})
	starts, cmd := recordedStarts(t)
	began := time.Now()
	startDaemon(t, bin, "lone", "--server", s.ClientURL(), "--bucket", "LONE", "--key", "job", "--", cmd[0], cmd[1], cmd[2])
	waitStarts(t, starts, 1)
	took := time.Since(began)
	t.Logf("election run started to its command running: %v", took)
	if took > time.Second {
		t.Errorf("a lone election run started its command %v after it began, want within a second", took)
	}
}
