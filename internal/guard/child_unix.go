//go:build unix

package guard

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvelect/election"
)

// ErrLeadershipEnded is Start's error when the leadership ended, or its
// work deadline passed, before COMMAND could start: COMMAND did not run
// (nothing the guard started runs), and the caller may campaign on.
var ErrLeadershipEnded = errors.New("leadership ended before the command could start")

// guardConfirm is how long, after this process has killed COMMAND's tree
// itself, a guard that is not stopped has to exit by itself before it is
// killed too: a guard that runs exits within milliseconds once the tree is
// gone; one that does not is hung. A stopped guard is killed at once.
const guardConfirm = 500 * time.Millisecond

// Child is a running COMMAND under its guard, which kills COMMAND's whole
// tree if this process dies, at the leadership's work deadline unless this
// process moves it, and when COMMAND exits. This process kills the tree
// itself, without the guard, when it asks for the tree's end (Kill, Stop
// past its grace) or the leadership's last work deadline passes: a stopped
// guard does not keep COMMAND alive.
type Child struct {
	pid     int           // COMMAND's process ID, which is also its process group's
	guard   *os.Process   // the guard
	done    chan struct{} // closed once COMMAND and everything it started have gone
	code    int           // COMMAND's status (128+N for signal N); set before done is closed
	expired bool          // the guard killed COMMAND at the work deadline; set before done is closed

	killing sync.Once // this process kills the tree itself (killTree), once

	mu      sync.Mutex
	control *os.File // to the guard
	killed  bool     // Kill was called: this process asked for the tree's end
	forced  bool     // this process killed the tree and then the guard, which did not exit
}

// Start starts argv with env under a guard, for the leadership whose
// context is leading, and keeps the guard's deadline on the leadership's
// work deadline (election.WorkDeadline) while the leadership lasts. COMMAND
// gets this process's standard output and error, and runs in a process
// group of its own. Start returns once COMMAND runs (also when COMMAND
// stopped the guard before it could report the start), or with an error:
// ErrLeadershipEnded if the leadership has ended or its work deadline
// passed first, which includes a guard that reported nothing until the
// work deadline (it is then killed with whatever it started, and this
// process may have been paused past the deadline); otherwise the guard
// could not be started or could not start COMMAND (the error is then the
// guard's reason).
func Start(leading context.Context, argv, env []string) (*Child, error) {
	until, ok := election.WorkDeadline(leading)
	if !ok {
		return nil, ErrLeadershipEnded
	}
	controlR, controlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	reportR, reportW, err := os.Pipe()
	if err != nil {
		controlR.Close()
		controlW.Close()
		return nil, err
	}
	c := &Child{done: make(chan struct{}), control: controlW}
	cmd := exec.Command(selfExecutable(), append([]string{Command, strconv.FormatInt(monotonicAt(until), 10), "--"}, argv...)...)
	cmd.Args[0] = guardName
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{controlR, reportW} // the guard's fds 3 and 4
	// A group of its own: signals for this process's group (a terminal's
	// Ctrl-C or Ctrl-Z) do not reach the guard.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	controlR.Close()
	reportW.Close()
	if err != nil {
		controlW.Close()
		reportR.Close()
		return nil, fmt.Errorf("starting the guard of the command: %w", err)
	}

	lines := make(chan string)
	go readReports(reportR, lines)
	pid, err := awaitStart(cmd, lines, until)
	if err != nil {
		controlW.Close()
		for range lines {
		}
		cmd.Wait()
		return nil, err
	}
	c.pid, c.guard = pid, cmd.Process
	go c.wait(cmd, lines)
	go c.follow(leading, until)
	return c, nil
}

// startPoll is how often Start looks whether the guard, before it reported
// COMMAND's start, was stopped.
const startPoll = 5 * time.Millisecond

// awaitStart waits for the guard's first report and returns COMMAND's
// process ID, or the guard's reason for not starting it. A guard stopped
// before it reported, as by a COMMAND whose first act is kill -STOP $PPID,
// reports nothing: COMMAND is then its child that leads a process group of
// its own, found in /proc (on Linux). A guard that reports nothing and has
// no such child by the work deadline until is killed with whatever it
// started (killUnreported) before awaitStart returns.
func awaitStart(cmd *exec.Cmd, lines <-chan string, until time.Time) (int, error) {
	deadline := time.NewTimer(time.Until(until))
	defer deadline.Stop()
	poll := time.NewTicker(startPoll)
	defer poll.Stop()
	for {
		select {
		case first := <-lines:
			verb, rest, _ := strings.Cut(strings.TrimSpace(first), " ")
			switch verb {
			case "started":
				pid, _ := strconv.Atoi(rest)
				return pid, nil
			case "late":
				return 0, ErrLeadershipEnded
			case "failed":
				_, msg, _ := strings.Cut(rest, " ")
				return 0, errors.New(msg)
			}
			cmd.Wait()
			return 0, fmt.Errorf("the guard of the command failed: %v", cmd.ProcessState)
		case <-poll.C:
			if isStopped(cmd.Process.Pid) {
				if pid := groupLeaderChild(cmd.Process.Pid); pid > 0 {
					return pid, nil
				}
			}
		case <-deadline.C:
			// Reached also when this process was paused past the deadline
			// with the guard's report waiting: either way the leadership may
			// be over, and COMMAND does not run for it.
			killUnreported(cmd.Process)
			return 0, fmt.Errorf("%w: the guard reported nothing until the leadership's work deadline (was it or this process stopped?): killed it", ErrLeadershipEnded)
		}
	}
}

// killUnreported kills a guard that reported nothing by the work deadline,
// and everything it started. Such a guard may be running late (a loaded
// machine) and start COMMAND at any moment until it dies: a COMMAND it
// started after its descendants were listed, and before it was killed,
// would be reparented away from it and run on unseen, past the leadership.
// So the guard is stopped first (SIGSTOP, which it cannot catch): once all
// its threads have stopped it starts nothing more and reaps nothing, and
// whatever it started stays in its tree. Its live descendants are then
// killed, again until none is left (a killed process runs until the kernel
// has ended it; zombies run no more), and only then the guard itself, which
// the caller reaps. When killUnreported returns, nothing the guard started
// runs.
func killUnreported(guard *os.Process) {
	syscall.Kill(guard.Pid, syscall.SIGSTOP)
	// A thread in the middle of starting COMMAND (vfork) stops once COMMAND
	// has been executed. One that does not stop (uninterruptible) is given
	// guardConfirm; its tree is killed all the same then.
	giveUp := time.NewTimer(guardConfirm)
	defer giveUp.Stop()
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	for waiting := true; waiting && !stoppedWhole(guard.Pid); {
		select {
		case <-giveUp.C:
			waiting = false
		case <-poll.C:
		}
	}
	pause := time.Millisecond
	for {
		live := descendants(guard.Pid)
		if len(live) == 0 {
			break
		}
		for _, pid := range live {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(pause) // no event tells of the end of a process that is not a child: look again
		pause = min(2*pause, 100*time.Millisecond)
	}
	guard.Kill()
}

// readReports sends each line the guard reports on lines, and closes lines
// at the end of the pipe: the guard has exited.
func readReports(r *os.File, lines chan<- string) {
	defer close(lines)
	defer r.Close()
	report := bufio.NewReader(r)
	for {
		line, err := report.ReadString('\n')
		if line != "" {
			lines <- line
		}
		if err != nil {
			return
		}
	}
}

// wait reads the guard's reports until it exits, then records COMMAND's
// status and closes done.
func (c *Child) wait(cmd *exec.Cmd, lines <-chan string) {
	for line := range lines {
		if strings.TrimSpace(line) == "expired" {
			c.expired = true
		}
	}
	cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	c.code = ws.ExitStatus()
	c.mu.Lock()
	defer c.mu.Unlock()
	if ws.Signaled() {
		if !c.forced {
			// Someone killed the guard: kill COMMAND's group in its
			// stead. What left the group is out of reach now.
			syscall.Kill(-c.pid, syscall.SIGKILL)
		}
		c.code = 128 + int(ws.Signal())
	}
	c.control.Close()
	close(c.done)
}

// follow moves the guard's deadline with the leadership's work deadline
// until COMMAND has gone or the leadership ends; the last deadline sent
// then holds, for the guard and for this process: if the tree has not gone
// by then, this process kills it itself (Kill) as soon as it sees the
// guard stopped, or guardConfirm later if the guard, not stopped, has not
// done it. It looks again after a quarter of the time left, so that a
// renewal is seen long before the old deadline.
func (c *Child) follow(leading context.Context, until time.Time) {
	for {
		next, ok := election.WorkDeadline(leading)
		if !ok {
			break
		}
		until = next
		c.tell(fmt.Sprintf("deadline %d", monotonicAt(until)))
		timer := time.NewTimer(max(time.Until(until)/4, time.Millisecond))
		select {
		case <-c.done:
			timer.Stop()
			return
		case <-timer.C:
		}
	}
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-c.done:
		return
	case <-timer.C:
	}
	// The guard kills the tree now, on its own clock, unless it is stopped.
	poll := time.NewTicker(startPoll)
	defer poll.Stop()
	confirm := time.NewTimer(guardConfirm)
	defer confirm.Stop()
	for !isStopped(c.guard.Pid) {
		select {
		case <-c.done:
			return
		case <-confirm.C:
			c.Kill()
			return
		case <-poll.C:
		}
	}
	c.Kill()
}

// tellTimeout bounds a write to the guard: the pipe fills if the guard is
// stopped long enough. A message dropped then is safe to lose: an older
// deadline holds earlier, and this process kills the tree itself.
const tellTimeout = 100 * time.Millisecond

// tell writes one message to the guard, unless COMMAND has gone or the
// pipe stays full for tellTimeout.
func (c *Child) tell(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Exited() {
		return
	}
	c.control.SetWriteDeadline(time.Now().Add(tellTimeout))
	fmt.Fprintln(c.control, msg)
}

// Stop has the guard send sig to COMMAND's process group (and SIGCONT, so
// that a stopped COMMAND can act on it), and kills the tree if COMMAND has
// not exited after grace, or at the leadership's last work deadline if that
// comes first. It returns once the tree has gone. A stopped guard passes no
// signal: COMMAND is then killed at the end of grace or at the deadline.
func (c *Child) Stop(sig syscall.Signal, grace time.Duration) {
	c.tell(fmt.Sprintf("signal %d", sig))
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-c.done:
	case <-timer.C:
		c.Kill()
		<-c.done
	}
}

// Kill kills COMMAND's tree now: it has the guard kill it, and kills it
// itself as well, COMMAND's process group and every live descendant of the
// guard (on Linux; the group alone elsewhere), again until none is left,
// not relying on a guard that may be stopped. A guard that is stopped, or
// has not exited guardConfirm after that, is killed too. Kill does not wait: Done is closed
// once the tree has gone and the guard has exited.
func (c *Child) Kill() {
	c.mu.Lock()
	c.killed = true
	c.mu.Unlock()
	c.tell("kill")
	c.killing.Do(func() { go c.killTree() })
}

// killTree kills COMMAND's tree from this process, then the guard if it is
// stopped or does not exit by itself within guardConfirm.
func (c *Child) killTree() {
	pause := time.Millisecond
	for {
		// COMMAND's process ID, and with it its group's, stays taken while
		// it is the guard's child, even as a zombie: only then is the
		// group surely still COMMAND's.
		if isChildOf(c.pid, c.guard.Pid) {
			syscall.Kill(-c.pid, syscall.SIGKILL)
		}
		live := descendants(c.guard.Pid)
		for _, pid := range live {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if len(live) == 0 {
			break
		}
		timer := time.NewTimer(pause)
		select {
		case <-c.done:
			timer.Stop()
			return
		case <-timer.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
	if !isStopped(c.guard.Pid) {
		timer := time.NewTimer(guardConfirm)
		defer timer.Stop()
		select {
		case <-c.done:
			return
		case <-timer.C:
		}
	}
	c.mu.Lock()
	if !c.Exited() {
		c.forced = true
		c.guard.Kill()
	}
	c.mu.Unlock()
}

// PID is COMMAND's process ID, which is also its process group's.
func (c *Child) PID() int { return c.pid }

// GuardPID is the process ID of COMMAND's guard, COMMAND's parent.
func (c *Child) GuardPID() int { return c.guard.Pid }

// Done is closed once COMMAND and everything it started have gone, and the
// guard has exited.
func (c *Child) Done() <-chan struct{} { return c.done }

// Exited reports whether COMMAND's tree has gone: whether Done is closed.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Expired reports whether the guard killed COMMAND's tree at the work
// deadline: this process did not move the deadline in time (was it
// paused?). It is false until Done is closed.
func (c *Child) Expired() bool { return c.Exited() && c.expired }

// Killed reports whether this process killed COMMAND's tree, or asked the
// guard to: Kill, Stop past its grace, or the last work deadline of an
// ended leadership passed with the guard stopped. COMMAND did not exit by
// itself then. It is false until Done is closed.
func (c *Child) Killed() bool {
	if !c.Exited() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.killed
}

// Forced reports whether this process killed COMMAND's tree itself and
// then the guard, which did not exit in time after it: the guard was
// stopped or hung. It is false until Done is closed.
func (c *Child) Forced() bool {
	if !c.Exited() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forced
}

// ExitCode is COMMAND's status, 128+N if signal N killed it, as a shell
// reports it. The tree must have gone: Done must be closed.
func (c *Child) ExitCode() int { return c.code }
