//go:build linux

package cli

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"
)

// The supervision chain with a stopped link: election, its guard, the
// command. Each test runs a command that forks under dash (sleep is the
// shell's child, not exec'd), records its starts, and samples every
// copySample which copies of it run: never two leaderships' at once.

// copySample is how often the tests look for two copies of a command.
const copySample = 50 * time.Millisecond

// markedCommand returns a shell script that records its start in file as
// recordingCommand's do (an agent's daemon with its node and its daemon's
// name), runs before, then sleeps with a mark in a child; and the mark.
func markedCommand(file string, agent bool, before string) (script, mark string) {
	mark = testenv.NewMark()
	record := "$KVELECT_LEADER $KVELECT_TOKEN $$ $KVELECT_KEY $KVELECT_BUCKET"
	if agent {
		record = "$KVELECT_NODE $KVELECT_TOKEN $$ $KVELECT_DAEMON $KVELECT_BUCKET"
	}
	return fmt.Sprintf(`echo "%s" >> %s; %s sleep %s; true`, record, file, before, mark), mark
}

// copies returns the tokens of the commands that run: of the live
// processes carrying mark and a token, guards left out.
func copies(mark string) map[uint64][]int {
	running := map[uint64][]int{}
	for pid, token := range testenv.Marked(mark) {
		if testenv.Comm(pid) == "kvelect-guard" {
			continue
		}
		running[token] = append(running[token], pid)
	}
	return running
}

// copyTimeline is what sampling the copies of a command saw: when each
// token was first and last seen running.
type copyTimeline struct {
	first, last map[uint64]time.Time
}

// sampleCopies looks for the copies of mark every copySample until done
// returns true or d has passed, and fails the test at once if two
// leaderships' copies run at the same time.
func sampleCopies(t *testing.T, mark string, d time.Duration, done func() bool) copyTimeline {
	t.Helper()
	seen := copyTimeline{first: map[uint64]time.Time{}, last: map[uint64]time.Time{}}
	tick := time.NewTicker(copySample)
	defer tick.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) && !done() {
		now := time.Now()
		running := copies(mark)
		for token := range running {
			if _, ok := seen.first[token]; !ok {
				seen.first[token] = now
			}
			seen.last[token] = now
		}
		if len(running) > 1 {
			t.Fatalf("two copies of the command at once: processes by token %v", running)
		}
		<-tick.C
	}
	return seen
}

// awaitStopped waits until process pid is stopped.
func awaitStopped(t *testing.T, what string, pid int) {
	t.Helper()
	testenv.Poll(t, what+" stopped", e2e.WaitTimeout, func() (string, bool) {
		state := testenv.State(pid)
		return state, state == "T"
	})
}

// stopGuard stops the guard of the command whose shell is pid (its
// parent) and returns the guard's process ID.
func stopGuard(t *testing.T, pid int) int {
	t.Helper()
	guard := testenv.Parent(pid)
	if comm := testenv.Comm(guard); comm != "kvelect-guard" {
		t.Fatalf("the parent %d of the command %d is %q, want its guard", guard, pid, comm)
	}
	syscall.Kill(guard, syscall.SIGSTOP)
	awaitStopped(t, "the guard", guard)
	return guard
}

// killMarked kills, when the test ends, whatever still carries mark: the
// commands and their guards, even those of a stopped chain.
func killMarked(t *testing.T, mark string) {
	t.Cleanup(func() {
		for pid := range testenv.Marked(mark) {
			syscall.Kill(pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGCONT)
		}
	})
}

// TestRunGivesNoSecondCopyWhenItsGuardIsStopped stops the guard of a's
// command and deletes the key: a's election kills the command itself at
// its work deadline, before the key could have aged out, and b's command
// never runs while a's does (sampled for 12 s).
func TestRunGivesNoSecondCopyWhenItsGuardIsStopped(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "STOPPED", TTL: ttl})
	starts := filepath.Join(t.TempDir(), "starts")
	script, mark := markedCommand(starts, false, "")
	killMarked(t, mark)
	killStartedCommands(t, starts)
	args := []string{"--server", s.ClientURL(), "--bucket", "STOPPED", "--key", "job", "--", "sh", "-c", script}
	a := e2e.StartDaemon(t, bin, "a", args...)
	first := e2e.WaitStarts(t, starts, 1)[0]
	b := e2e.StartDaemon(t, bin, "b", args...)
	testenv.Eventually(t, "b campaigning", e2e.WaitTimeout, func() bool { return strings.Contains(b.Logged(t), "campaigning") })

	guard := stopGuard(t, first.PID)
	deleted := time.Now()
	if err := kv.Delete(context.Background(), "job"); err != nil {
		t.Fatal(err)
	}
	seen := sampleCopies(t, mark, 12*time.Second, func() bool { return false })
	gone, ok := seen.last[first.Token]
	if !ok || copies(mark)[first.Token] != nil {
		t.Fatalf("a's command (token %d) seen until %v, running now: %v", first.Token, gone, copies(mark))
	}
	t.Logf("a's command last seen %v after the key's deletion", gone.Sub(deleted))
	// a's last renewal came before the deletion: its key could have aged
	// out this long after it at the earliest.
	if ageOut := election.TimingFor(ttl, 0).EarliestExpiry; gone.Sub(deleted) >= ageOut {
		t.Errorf("a's command ran %v after the key's deletion, past the earliest moment its key could age out, %v after a's last renewal", gone.Sub(deleted), ageOut)
	}
	if len(seen.first) < 2 {
		t.Errorf("no leader started the command again within 12 s: tokens seen %v", slices.Collect(maps.Keys(seen.first)))
	}
	wantLogged(t, a.Logged(t), "the command's guard did not answer")
	if testenv.Alive(guard) {
		t.Errorf("a's stopped guard %d still runs", guard)
	}
}

// TestAgentGivesNoSecondCopyWhenItLeavesWithAStoppedGuard stops the guard
// of node0's daemon and sends node0 SIGTERM, a graceful leave: node0 kills
// the daemon itself at the end of its grace, before its work deadline,
// kills the stopped guard, and exits; node1 starts the daemon only then
// (sampled for 12 s).
func TestAgentGivesNoSecondCopyWhenItLeavesWithAStoppedGuard(t *testing.T) {
	t.Parallel()
	const (
		ttl   = 2 * time.Second
		grace = time.Second
	)
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "AGENTSTOP", TTL: ttl})
	starts := filepath.Join(t.TempDir(), "starts")
	script, mark := markedCommand(starts, true, "")
	killMarked(t, mark)
	agent := func(name string) *e2e.Process {
		return e2e.StartProcess(t, bin, name, "agent", "--name", name, "--log-format", "json", "--server", s.ClientURL(),
			"--bucket", "AGENTSTOP", "--grace", grace.String(), "--daemon", "d="+script)
	}
	node0 := agent("node0")
	first := e2e.WaitStarts(t, starts, 1)[0]
	node1 := agent("node1")
	testenv.Eventually(t, "node1 joined", e2e.WaitTimeout, func() bool { return strings.Contains(node1.Logged(t), "joined the fleet") })

	guard := stopGuard(t, first.PID)
	leaving := time.Now()
	node0.Cmd.Process.Signal(syscall.SIGTERM)
	seen := sampleCopies(t, mark, 12*time.Second, func() bool { return false })
	data, _ := os.ReadFile(starts)
	all := e2e.ParseStarts(data)
	if len(all) < 2 {
		t.Fatalf("node1 did not start the daemon within 12 s of node0's SIGTERM; node0's log:\n%s", node0.Logged(t))
	}
	second := all[1]
	gone, ok := seen.last[first.Token]
	if !ok || copies(mark)[first.Token] != nil {
		t.Fatalf("node0's daemon (token %d) seen until %v, running now: %v", first.Token, gone, copies(mark))
	}
	workDeadline := election.TimingFor(ttl, 0).WorkDeadline
	t.Logf("node0's daemon last seen %v after SIGTERM (grace %v, work deadline %v after the last renewal); node1's first seen %v after it",
		gone.Sub(leaving), grace, workDeadline, seen.first[second.Token].Sub(leaving))
	// node0's last renewal came before the SIGTERM: its work deadline is
	// at most that long after it, and the grace ends sooner.
	if gone.Sub(leaving) >= workDeadline {
		t.Errorf("node0's daemon ran %v after SIGTERM, past the work deadline, %v after the last renewal", gone.Sub(leaving), workDeadline)
	}
	if second.Name != "node1" {
		t.Errorf("the daemon started again on %s, want node1", second.Name)
	}
	if testenv.Alive(guard) {
		t.Errorf("node0's stopped guard %d still runs 12 s after SIGTERM", guard)
	}
	if code := node0.Wait(t); code != ExitOK {
		t.Errorf("node0 exited %d after SIGTERM, want 0", code)
	}
	wantLogged(t, node0.Logged(t), "the daemon's guard did not answer", "left the fleet")
}

// TestRunKeepsItsCommandWhenItsGuardIsContinuedAfterALongStop stops the
// guard of a's command for longer than a TTL while a leads and renews,
// then continues it: the guard reads the deadlines a moved meanwhile, so
// a's command runs on, not killed at the deadline the guard had read, and
// no other copy runs.
func TestRunKeepsItsCommandWhenItsGuardIsContinuedAfterALongStop(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CONTINUED", TTL: ttl})
	starts := filepath.Join(t.TempDir(), "starts")
	script, mark := markedCommand(starts, false, "")
	killMarked(t, mark)
	killStartedCommands(t, starts)
	args := []string{"--server", s.ClientURL(), "--bucket", "CONTINUED", "--key", "job", "--", "sh", "-c", script}
	a := e2e.StartDaemon(t, bin, "a", args...)
	first := e2e.WaitStarts(t, starts, 1)[0]
	b := e2e.StartDaemon(t, bin, "b", args...)
	testenv.Eventually(t, "b campaigning", e2e.WaitTimeout, func() bool { return strings.Contains(b.Logged(t), "campaigning") })

	guard := stopGuard(t, first.PID)
	sampleCopies(t, mark, 3*ttl/2, func() bool { return false }) // the stop, past the work deadline the guard read
	syscall.Kill(guard, syscall.SIGCONT)
	seen := sampleCopies(t, mark, ttl, func() bool { return false })
	if len(seen.first) != 1 || !testenv.Alive(first.PID) {
		t.Errorf("after the guard was continued: tokens seen %v, a's first command %d alive: %v; want it alone, still running", slices.Collect(maps.Keys(seen.first)), first.PID, testenv.Alive(first.PID))
	}
	if strings.Contains(a.Logged(t), "killed at the") {
		t.Errorf("a's command was killed at a work deadline; a's log:\n%s", a.Logged(t))
	}
}

// TestRunGivesNoSecondCopyWhenTheCommandStopsItsParent runs a command that
// stops its parent, the guard (kill -STOP $PPID), then sends its election
// SIGTERM: the guard passes no signal, so the command is killed at the end
// of the grace, and the other election's command starts only then.
func TestRunGivesNoSecondCopyWhenTheCommandStopsItsParent(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "PARENT", TTL: 2 * time.Second})
	starts := filepath.Join(t.TempDir(), "starts")
	script, mark := markedCommand(starts, false, "kill -STOP $PPID;")
	killMarked(t, mark)
	killStartedCommands(t, starts)
	args := []string{"--server", s.ClientURL(), "--bucket", "PARENT", "--key", "job", "--grace", "1s", "--", "sh", "-c", script}
	a := e2e.StartDaemon(t, bin, "a", args...)
	first := e2e.WaitStarts(t, starts, 1)[0]
	b := e2e.StartDaemon(t, bin, "b", args...)
	testenv.Eventually(t, "b campaigning", e2e.WaitTimeout, func() bool { return strings.Contains(b.Logged(t), "campaigning") })
	awaitStopped(t, "the guard", testenv.Parent(first.PID))

	a.Cmd.Process.Signal(syscall.SIGTERM)
	sampleCopies(t, mark, e2e.WaitTimeout, func() bool {
		data, _ := os.ReadFile(starts)
		return len(e2e.ParseStarts(data)) > 1
	})
	data, _ := os.ReadFile(starts)
	if len(e2e.ParseStarts(data)) < 2 {
		t.Fatalf("b did not start the command within %v of a's SIGTERM; a's log:\n%s\nb's log:\n%s", e2e.WaitTimeout, a.Logged(t), b.Logged(t))
	}
	if second := e2e.WaitStarts(t, starts, 2)[1]; second.Name != "b" {
		t.Errorf("the command started again on %s, want b", second.Name)
	}
	sampleCopies(t, mark, time.Second, func() bool { return false })
	if code := a.Wait(t); code != 128+int(syscall.SIGKILL) {
		t.Errorf("a exited %d, want %d: its command killed, the stopped guard having passed no SIGTERM", code, 128+int(syscall.SIGKILL))
	}
	wantLogged(t, a.Logged(t), "the command's guard did not answer", "released the key")
}

// pty is a pseudo-terminal whose output is kept.
type pty struct {
	master, slave *os.File
	mu            sync.Mutex
	out           strings.Builder
	done          chan struct{}
}

// openPTY opens a pseudo-terminal, reads its output until the test ends,
// and closes it then.
func openPTY(t *testing.T) *pty {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	master := os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &pty{master: master, slave: slave, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		slave.Close()
		master.Close()
		<-p.done
	})
	return p
}

// output is what the terminal showed so far.
func (p *pty) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// TestRunCtrlZInATerminalGivesNoSecondCopy runs a in a terminal, from a
// shell with job control as a user would, and b elsewhere. Job-control
// stops sent to a's guard do not stop it; Ctrl-Z stops a, and the guard,
// in a group of its own, kills a's command at its work deadline. Held for
// two TTLs, it never gives two copies; once a continues, it campaigns on.
func TestRunCtrlZInATerminalGivesNoSecondCopy(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CTRLZ", TTL: ttl})
	starts := filepath.Join(t.TempDir(), "starts")
	script, mark := markedCommand(starts, false, "")
	killMarked(t, mark)
	killStartedCommands(t, starts)

	term := openPTY(t)
	// The shell leads the terminal's session and, with job control (set
	// -m), runs election in a foreground group of its own, which Ctrl-Z
	// stops; it then goes on to sleep, so that the stopped group keeps a
	// parent in its session and is not orphaned. It execs sleep: a sleep
	// it forked would be a job in a group of its own, which the cleanup's
	// kill of the shell's group misses, and which, if it outlived the
	// shell, would hold the terminal open and the cleanup waiting for its
	// end (seen with the tests running in parallel).
	shell := exec.Command("/bin/sh", "-c", `set -m; "$ELECTION" run --name a --log-format json --server "$URL" --bucket CTRLZ --key job -- sh -c "$SCRIPT"; echo "election: $?"; exec sleep 1000`)
	shell.Env = append(os.Environ(), "ELECTION="+bin, "URL="+s.ClientURL(), "SCRIPT="+script,
		"XDG_CONFIG_HOME="+t.TempDir(), "NATS_URL=", "NATS_CONTEXT=")
	shell.Stdin, shell.Stdout, shell.Stderr = term.slave, term.slave, term.slave
	shell.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-shell.Process.Pid, syscall.SIGKILL) // the shell, or the sleep it became
		shell.Wait()
	})
	first := e2e.WaitStarts(t, starts, 1)[0]
	if first.Name != "a" {
		t.Fatalf("the command started on %s first, want a", first.Name)
	}
	guard := testenv.Parent(first.PID)
	a := testenv.Parent(guard)
	t.Cleanup(func() {
		syscall.Kill(a, syscall.SIGKILL)
		syscall.Kill(a, syscall.SIGCONT)
	})
	if pgid, _ := syscall.Getpgid(a); pgid != a {
		t.Fatalf("election run (%d) is in process group %d, want one of its own: the shell does no job control", a, pgid)
	}
	b := e2e.StartDaemon(t, bin, "b", "--server", s.ClientURL(), "--bucket", "CTRLZ", "--key", "job", "--", "sh", "-c", script)
	testenv.Eventually(t, "b campaigning", e2e.WaitTimeout, func() bool { return strings.Contains(b.Logged(t), "campaigning") })

	for _, sig := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU} {
		syscall.Kill(guard, sig)
	}
	if _, err := term.master.Write([]byte{0x1a}); err != nil { // Ctrl-Z
		t.Fatal(err)
	}
	awaitStopped(t, "election run after Ctrl-Z", a)
	stopped := time.Now()
	seen := sampleCopies(t, mark, 2*ttl, func() bool { return false })
	gone, ok := seen.last[first.Token]
	if !ok || copies(mark)[first.Token] != nil {
		t.Fatalf("a's command (token %d) still runs %v after Ctrl-Z: %v", first.Token, 2*ttl, copies(mark))
	}
	t.Logf("a's command last seen %v after Ctrl-Z", gone.Sub(stopped))
	if ageOut := election.TimingFor(ttl, 0).EarliestExpiry; gone.Sub(stopped) >= ageOut {
		t.Errorf("a's command ran %v after Ctrl-Z, past the earliest moment its key could age out, %v after a's last renewal", gone.Sub(stopped), ageOut)
	}
	if testenv.Alive(guard) {
		t.Errorf("a's guard %d still runs after it killed the command", guard)
	}

	syscall.Kill(a, syscall.SIGCONT) // bg
	testenv.Eventually(t, "a campaigning again", e2e.WaitTimeout, func() bool {
		return strings.Contains(term.output(), "the command was killed at the leadership's work deadline") &&
			strings.Contains(term.output(), "the command stopped; campaigning again")
	})
	sampleCopies(t, mark, ttl/2, func() bool { return false })
}
