//go:build linux

package guard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/leadtest"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// leadership runs an election on an embedded server and returns the
// context of its first leadership, and a function that ends the election
// (it releases the key). The election ends when the test ends, if not
// before.
func leadership(t *testing.T) (leading context.Context, end func()) {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "GUARD", TTL: election.MinTTL})
	return leadtest.Lead(t, kv, waitTimeout)
}

// start starts "sh -c script" under a guard for leading, with the token
// the tests' processes carry, and waits for its end when the test ends.
func start(t *testing.T, leading context.Context, script string) *Child {
	t.Helper()
	c, err := Start(leading, []string{"sh", "-c", script}, append(os.Environ(), "KVELECT_TOKEN=7"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Kill()
		<-c.Done()
	})
	return c
}

// awaitDone waits for COMMAND's tree to go.
func awaitDone(t *testing.T, c *Child) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(waitTimeout):
		t.Fatalf("COMMAND still runs after %v", waitTimeout)
	}
}

// TestStartNeedsALeadership starts no COMMAND for a context that is no
// leadership's, or a leadership that has ended.
func TestStartNeedsALeadership(t *testing.T) {
	c, err := Start(context.Background(), []string{"true"}, nil)
	if err == nil {
		<-c.Done()
		t.Errorf("Start without a leadership started COMMAND %d, want an error", c.PID())
	} else if !errors.Is(err, ErrLeadershipEnded) {
		t.Errorf("Start without a leadership: %v, want ErrLeadershipEnded", err)
	}
	leading, end := leadership(t)
	end()
	c, err = Start(leading, []string{"true"}, nil)
	if err == nil {
		<-c.Done()
		t.Errorf("Start for an ended leadership started COMMAND %d, want an error", c.PID())
	} else if !errors.Is(err, ErrLeadershipEnded) {
		t.Errorf("Start for an ended leadership: %v, want ErrLeadershipEnded", err)
	}
}

// TestAwaitStartPausedPastTheDeadlineEndsTheLeadership stands a process in
// for a guard that reported COMMAND's start while this process was paused
// past the work deadline: the report and the deadline are both ready when
// awaitStart looks. Whichever it takes, it gives COMMAND's process ID or
// ErrLeadershipEnded (the caller campaigns on), never another error, which
// would make election run exit 126 and an agent count a crash.
func TestAwaitStartPausedPastTheDeadlineEndsTheLeadership(t *testing.T) {
	const runs = 20
	ended := 0
	for range runs {
		standIn := exec.Command("sleep", "1000")
		if err := standIn.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1)
		lines <- fmt.Sprintf("started %d\n", standIn.Process.Pid)
		pid, err := awaitStart(standIn, lines, time.Now().Add(-time.Millisecond))
		switch {
		case errors.Is(err, ErrLeadershipEnded):
			ended++
		case err != nil:
			t.Errorf("awaitStart: %v, want ErrLeadershipEnded or the start", err)
		case pid != standIn.Process.Pid:
			t.Errorf("awaitStart: started %d, want %d", pid, standIn.Process.Pid)
		}
		standIn.Process.Kill()
		standIn.Wait()
	}
	t.Logf("%d of %d runs took the deadline (ErrLeadershipEnded), the others the report", ended, runs)
}

// TestStartReportsACommandItCannotStart returns the guard's reason for a
// COMMAND that is not found.
func TestStartReportsACommandItCannotStart(t *testing.T) {
	leading, _ := leadership(t)
	c, err := Start(leading, []string{"no-such-command-kvelect"}, os.Environ())
	if err == nil {
		<-c.Done()
		t.Fatal("Start of a command that does not exist: no error")
	}
	if !strings.Contains(err.Error(), "no-such-command-kvelect") {
		t.Errorf("Start of a command that does not exist: %q, want the command's name", err)
	}
}

// TestChildStopPassesTheSignal stops a COMMAND that traps SIGTERM: Stop
// returns once the tree has gone, with COMMAND's status from its trap.
func TestChildStopPassesTheSignal(t *testing.T) {
	leading, _ := leadership(t)
	mark := testenv.NewMark()
	c := start(t, leading, testenv.WithMark(`trap 'exit 7' TERM; sleep MARK & wait`, mark))
	testenv.AwaitSleeps(t, mark, 1, waitTimeout)
	if c.Exited() || c.PID() <= 0 {
		t.Fatalf("a running COMMAND: Exited %v, PID %d; want false and its process ID", c.Exited(), c.PID())
	}
	c.Stop(syscall.SIGTERM, time.Hour)
	if !c.Exited() || c.Expired() || c.ExitCode() != 7 {
		t.Errorf("after Stop: Exited %v, Expired %v, ExitCode %d; want true, false and COMMAND's 7", c.Exited(), c.Expired(), c.ExitCode())
	}
	if left := testenv.Marked(mark); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
}

// TestChildStopKillsAfterGrace stops a COMMAND that ignores SIGTERM: it
// is killed once the grace is over.
func TestChildStopKillsAfterGrace(t *testing.T) {
	leading, _ := leadership(t)
	mark := testenv.NewMark()
	c := start(t, leading, testenv.WithMark(`trap '' TERM; sleep MARK & wait`, mark))
	testenv.AwaitSleeps(t, mark, 1, waitTimeout)
	began := time.Now()
	c.Stop(syscall.SIGTERM, 200*time.Millisecond)
	if took := time.Since(began); took < 200*time.Millisecond {
		t.Errorf("Stop returned %v after it began, before the grace was over", took)
	}
	if code := c.ExitCode(); code != 128+int(syscall.SIGKILL) {
		t.Errorf("ExitCode %d after the grace, want %d: COMMAND killed", code, 128+int(syscall.SIGKILL))
	}
	if left := testenv.Marked(mark); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
}

// TestChildKillEndsTheTree kills a COMMAND: Done is closed once the tree
// has gone.
func TestChildKillEndsTheTree(t *testing.T) {
	leading, _ := leadership(t)
	mark := testenv.NewMark()
	c := start(t, leading, testenv.WithMark(`(setsid sleep MARK &); sleep MARK & wait`, mark))
	testenv.AwaitSleeps(t, mark, 2, waitTimeout)
	c.Kill()
	awaitDone(t, c)
	if c.Expired() || c.ExitCode() != 128+int(syscall.SIGKILL) {
		t.Errorf("after Kill: Expired %v, ExitCode %d; want false and %d", c.Expired(), c.ExitCode(), 128+int(syscall.SIGKILL))
	}
	if left := testenv.Marked(mark); len(left) > 0 {
		t.Errorf("processes left after Kill: %v", left)
	}
}

// TestChildExpiresWhenTheLeadershipEnds ends the leadership without
// stopping COMMAND: the last deadline sent holds, and the guard kills the
// tree at it and reports it.
func TestChildExpiresWhenTheLeadershipEnds(t *testing.T) {
	leading, end := leadership(t)
	mark := testenv.NewMark()
	c := start(t, leading, testenv.WithMark(`sleep MARK & wait`, mark))
	testenv.AwaitSleeps(t, mark, 1, waitTimeout)
	deadline, ok := election.WorkDeadline(leading)
	if !ok {
		t.Fatal("the leadership ended before it was ended")
	}
	end()
	awaitDone(t, c)
	if gone := time.Now(); gone.Before(deadline) {
		t.Errorf("COMMAND was killed %v before the work deadline", deadline.Sub(gone))
	}
	if !c.Expired() || c.ExitCode() != 128+int(syscall.SIGKILL) {
		t.Errorf("after the work deadline: Expired %v, ExitCode %d; want true and %d", c.Expired(), c.ExitCode(), 128+int(syscall.SIGKILL))
	}
	if left := testenv.Marked(mark); len(left) > 0 {
		t.Errorf("processes left after the work deadline: %v", left)
	}
}

// stopGuard stops c's guard with SIGSTOP until the test ends, and waits
// until it is stopped.
func stopGuard(t *testing.T, c *Child) {
	t.Helper()
	pid := c.GuardPID()
	syscall.Kill(pid, syscall.SIGSTOP)
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	testenv.Poll(t, "the guard stopped", waitTimeout, func() (string, bool) {
		state := testenv.State(pid)
		return state, state == "T" || state == ""
	})
}

// TestChildKillsTheTreeOfAStoppedGuard stops COMMAND's guard, then stops
// COMMAND, of every forking shape: this process kills the tree itself at
// the end of the grace, what left the group included, then the guard.
func TestChildKillsTheTreeOfAStoppedGuard(t *testing.T) {
	leading, _ := leadership(t)
	for _, shape := range testenv.ForkingShapes {
		mark := testenv.NewMark()
		c := start(t, leading, testenv.WithMark(shape.Script, mark))
		testenv.AwaitSleeps(t, mark, shape.Sleeps, waitTimeout)
		stopGuard(t, c)
		began := time.Now()
		c.Stop(syscall.SIGTERM, 100*time.Millisecond)
		t.Logf("%s: Stop returned after %v", shape.Name, time.Since(began))
		if !c.Forced() || c.ExitCode() != 128+int(syscall.SIGKILL) {
			t.Errorf("%s: after Stop: Forced %v, ExitCode %d; want true and %d", shape.Name, c.Forced(), c.ExitCode(), 128+int(syscall.SIGKILL))
		}
		if left := testenv.Marked(mark); len(left) > 0 {
			t.Errorf("%s: processes left after Stop: %v", shape.Name, left)
		}
		if testenv.Alive(c.GuardPID()) {
			t.Errorf("%s: the stopped guard %d still runs after Stop", shape.Name, c.GuardPID())
		}
	}
}

// TestChildKillsAtTheDeadlineWhenTheGuardIsStopped stops COMMAND's guard
// and ends the leadership without stopping COMMAND: this process kills the
// tree at the last work deadline, before the key can age out
// (election.Timing: 39 ms later at the smallest TTL).
func TestChildKillsAtTheDeadlineWhenTheGuardIsStopped(t *testing.T) {
	leading, end := leadership(t)
	mark := testenv.NewMark()
	c := start(t, leading, testenv.WithMark(`sh -c 'sleep MARK; true'`, mark))
	testenv.AwaitSleeps(t, mark, 1, waitTimeout)
	stopGuard(t, c)
	deadline, ok := election.WorkDeadline(leading)
	if !ok {
		t.Fatal("the leadership ended before it was ended")
	}
	end()
	testenv.Poll(t, "the tree gone", waitTimeout, func() (map[int]uint64, bool) {
		left := testenv.Marked(mark)
		delete(left, c.GuardPID()) // the guard's arguments hold the mark too
		return left, len(left) == 0
	})
	gone := time.Now()
	timing := election.TimingFor(election.MinTTL, 0)
	ageOut := deadline.Add(timing.EarliestExpiry - timing.WorkDeadline)
	t.Logf("the tree was gone %v after the work deadline; the key could age out %v after it", gone.Sub(deadline), ageOut.Sub(deadline))
	if gone.Before(deadline) || gone.After(ageOut) {
		t.Errorf("the tree was gone %v after the work deadline, want after it and before the key can age out, %v after it", gone.Sub(deadline), ageOut.Sub(deadline))
	}
	awaitDone(t, c)
	if !c.Forced() {
		t.Error("Forced is false: the stopped guard cannot have killed the tree")
	}
}

// TestChildStopWakesAStoppedCommand stops a COMMAND that stopped itself:
// the SIGTERM is followed by a SIGCONT, and its trap gives its status.
func TestChildStopWakesAStoppedCommand(t *testing.T) {
	leading, _ := leadership(t)
	mark := testenv.NewMark()
	c := start(t, leading, testenv.WithMark(`trap 'exit 7' TERM; sleep MARK & kill -STOP $$; wait`, mark))
	testenv.Poll(t, "COMMAND stopped", waitTimeout, func() (string, bool) {
		state := testenv.State(c.PID())
		return state, state == "T"
	})
	c.Stop(syscall.SIGTERM, time.Hour)
	if c.ExitCode() != 7 || c.Forced() {
		t.Errorf("after Stop: ExitCode %d, Forced %v; want COMMAND's 7 from its trap, false", c.ExitCode(), c.Forced())
	}
}

// TestStartReturnsWhenTheCommandStopsTheGuardAtOnce starts a COMMAND whose
// first act is to stop its parent, the guard, often before the guard has
// reported the start: Start returns all the same, with COMMAND's process
// ID, and Stop kills the tree at the end of the grace.
func TestStartReturnsWhenTheCommandStopsTheGuardAtOnce(t *testing.T) {
	leading, _ := leadership(t)
	for range 5 {
		mark := testenv.NewMark()
		c := start(t, leading, testenv.WithMark(`kill -STOP $PPID; sleep MARK; true`, mark))
		t.Cleanup(func() { syscall.Kill(c.GuardPID(), syscall.SIGCONT) })
		testenv.AwaitSleeps(t, mark, 1, waitTimeout)
		if parentOf := testenv.Parent(c.PID()); parentOf != c.GuardPID() {
			t.Fatalf("Start gave COMMAND %d, whose parent is %d, not the guard %d", c.PID(), parentOf, c.GuardPID())
		}
		c.Stop(syscall.SIGTERM, 50*time.Millisecond)
		if !c.Forced() {
			t.Error("Forced is false: the stopped guard cannot have killed the tree")
		}
		if left := testenv.Marked(mark); len(left) > 0 {
			t.Errorf("processes left after Stop: %v", left)
		}
	}
}

// TestAwaitStartFindsTheCommandOfAStoppedGuard stands a shell in for a
// guard stopped before it reported COMMAND's start: awaitStart returns its
// child that leads a process group of its own. A stand-in stopped before it
// started anything is killed at the deadline, with an error.
func TestAwaitStartFindsTheCommandOfAStoppedGuard(t *testing.T) {
	mark := testenv.NewMark()
	// setsid makes the sleep lead a group of its own, as COMMAND does
	// under its guard.
	stopped := exec.Command("sh", "-c", testenv.WithMark(`setsid sleep MARK & kill -STOP $$`, mark))
	if err := stopped.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range descendants(stopped.Process.Pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		stopped.Process.Kill()
		stopped.Wait()
	})
	pid, err := awaitStart(stopped, make(chan string), time.Now().Add(waitTimeout))
	if err != nil || testenv.Parent(pid) != stopped.Process.Pid {
		t.Fatalf("awaitStart: %d, %v; want the stopped stand-in's child, the sleep", pid, err)
	}
	if pgid, _ := syscall.Getpgid(pid); pgid != pid {
		t.Errorf("awaitStart gave %d, of group %d: not a group leader", pid, pgid)
	}

	early := exec.Command("sh", "-c", `kill -STOP $$; sleep 1000`)
	if err := early.Start(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	pid, err = awaitStart(early, make(chan string), began.Add(200*time.Millisecond))
	if !errors.Is(err, ErrLeadershipEnded) || !strings.Contains(err.Error(), "reported nothing") {
		t.Errorf("awaitStart of a stand-in stopped before it started anything: %d, %v; want ErrLeadershipEnded at the deadline", pid, err)
	}
	early.Wait()
	if took := time.Since(began); took < 200*time.Millisecond {
		t.Errorf("awaitStart gave up after %v, before the deadline", took)
	}
}

// TestAwaitStartLeavesNothingOfAGuardThatNeverReports stands a shell in for
// a guard that runs but has reported nothing by the deadline, as a guard
// late on a loaded machine, and that keeps starting processes until it is
// killed, as such a guard may start COMMAND at any moment: once awaitStart
// has given up at the deadline, nothing the stand-in started runs, not
// even what it started while awaitStart was killing the rest.
func TestAwaitStartLeavesNothingOfAGuardThatNeverReports(t *testing.T) {
	mark := testenv.NewMark()
	late := exec.Command("sh", "-c", testenv.WithMark(`while :; do sleep MARK & done`, mark))
	late.Env = append(os.Environ(), "KVELECT_TOKEN=7")
	if err := late.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		late.Process.Kill()
		late.Wait()
		for pid := range testenv.Marked(mark) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	testenv.AwaitSleeps(t, mark, 1, waitTimeout)
	pid, err := awaitStart(late, make(chan string), time.Now())
	if !errors.Is(err, ErrLeadershipEnded) || !strings.Contains(err.Error(), "reported nothing") {
		t.Errorf("awaitStart of a stand-in that never reports: %d, %v; want ErrLeadershipEnded at the deadline", pid, err)
	}
	late.Wait()
	if left := testenv.Marked(mark); len(left) > 0 {
		t.Errorf("%d processes of the stand-in run on after awaitStart gave up on it, such as %d", len(left), slices.Min(slices.Collect(maps.Keys(left))))
	}
}
