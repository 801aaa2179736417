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

// Child is a running COMMAND under its guard, which kills COMMAND's whole
// tree if this process dies, at the leadership's work deadline unless this
// process moves it, and when COMMAND exits.
type Child struct {
	pid     int           // COMMAND's process ID, which is also its process group's
	done    chan struct{} // closed once COMMAND and everything it started have gone
	code    int           // COMMAND's status (128+N for signal N); set before done is closed
	expired bool          // the guard killed COMMAND at the work deadline; set before done is closed

	mu      sync.Mutex
	control *os.File // to the guard
}

// Start starts argv with env under a guard, for the leadership whose
// context is leading, and keeps the guard's deadline on the leadership's
// work deadline (election.WorkDeadline) while the leadership lasts. COMMAND
// gets this process's standard output and error, and runs in a process
// group of its own. Start returns once COMMAND runs, or with an error if
// the leadership has ended, or the guard could not be started or could not
// start COMMAND (the error is then the guard's reason).
func Start(leading context.Context, argv, env []string) (*Child, error) {
	until, ok := election.WorkDeadline(leading)
	if !ok {
		return nil, errors.New("leadership ended before COMMAND could start")
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
	// Ctrl-C) do not reach the guard.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	controlR.Close()
	reportW.Close()
	if err != nil {
		controlW.Close()
		reportR.Close()
		return nil, fmt.Errorf("starting the guard of COMMAND: %w", err)
	}

	report := bufio.NewReader(reportR)
	first, _ := report.ReadString('\n')
	verb, rest, _ := strings.Cut(strings.TrimSpace(first), " ")
	if verb != "started" {
		reportR.Close()
		controlW.Close()
		cmd.Wait()
		if verb == "failed" {
			_, msg, _ := strings.Cut(rest, " ")
			return nil, errors.New(msg)
		}
		return nil, fmt.Errorf("the guard of COMMAND failed: %v", cmd.ProcessState)
	}
	c.pid, _ = strconv.Atoi(rest)
	go c.wait(cmd, report, reportR)
	go c.follow(leading)
	return c, nil
}

// wait reads the guard's reports until it exits, then records COMMAND's
// status and closes done.
func (c *Child) wait(cmd *exec.Cmd, report *bufio.Reader, r *os.File) {
	for {
		line, err := report.ReadString('\n')
		if strings.TrimSpace(line) == "expired" {
			c.expired = true
		}
		if err != nil {
			break
		}
	}
	r.Close()
	cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	c.code = ws.ExitStatus()
	if ws.Signaled() {
		// Someone killed the guard: kill COMMAND's group in its stead. What
		// left the group is out of reach now.
		syscall.Kill(-c.pid, syscall.SIGKILL)
		c.code = 128 + int(ws.Signal())
	}
	c.mu.Lock()
	c.control.Close()
	close(c.done)
	c.mu.Unlock()
}

// follow moves the guard's deadline with the leadership's work deadline
// until COMMAND has gone or the leadership ends; the last deadline sent
// then holds. It looks again after a quarter of the time left, so that a
// renewal is seen long before the old deadline.
func (c *Child) follow(leading context.Context) {
	for {
		until, ok := election.WorkDeadline(leading)
		if !ok {
			return
		}
		c.tell(fmt.Sprintf("deadline %d", monotonicAt(until)))
		timer := time.NewTimer(max(time.Until(until)/4, time.Millisecond))
		select {
		case <-c.done:
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// tell writes one message to the guard, unless COMMAND has gone.
func (c *Child) tell(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Exited() {
		return
	}
	fmt.Fprintln(c.control, msg)
}

// Stop sends sig to COMMAND's process group, and kills the tree if COMMAND
// has not exited after grace. It returns once the tree has gone.
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

// Kill has the guard kill COMMAND's tree now. It does not wait: Done is
// closed once the tree has gone.
func (c *Child) Kill() { c.tell("kill") }

// PID is COMMAND's process ID, which is also its process group's.
func (c *Child) PID() int { return c.pid }

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

// ExitCode is COMMAND's status, 128+N if signal N killed it, as a shell
// reports it. The tree must have gone: Done must be closed.
func (c *Child) ExitCode() int { return c.code }
