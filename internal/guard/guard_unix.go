//go:build unix

package guard

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The guard is the election binary itself, started again as "election
// __guard" between election and each COMMAND it runs (see the package
// doc).
//
// The protocol is lines of text. Election writes on the guard's fd 3:
//
//	deadline NS   kill the tree at NS (CLOCK_MONOTONIC, ns) unless moved again
//	signal N      send signal N to COMMAND's process group
//	kill          kill the tree now
//
// The guard writes on its fd 4 "started PID" once COMMAND runs, "late" if
// the deadline had passed before COMMAND could start (it does not start
// it), or "failed CODE MESSAGE" if it could not start it; then "expired" if
// it killed the tree at the deadline. It exits with COMMAND's status (128+N if signal N killed
// it) once the tree is gone. Before it kills the tree at the deadline it
// reads every message waiting in its pipe: a guard that was stopped past
// the deadline, and is continued, acts on the deadlines election moved
// meanwhile, not on the one it had read.

// The guard's file descriptors for the pipes to and from election.
const (
	guardControlFD = 3
	guardReportFD  = 4
)

// guardName is the guard's process name (at most 15 bytes) and argv[0],
// for ps and top. It does not contain "election", so that pkill election,
// even with SIGKILL, leaves the guards to kill their COMMANDs.
const guardName = "kvelect-guard"

// Main runs the guard, the hidden command Command: args are the arguments
// after Command, the first deadline and COMMAND, as "NS -- COMMAND
// [ARGS...]", and its pipes to and from Start are its file descriptors 3
// and 4. It returns the guard's exit status: COMMAND's (128+N if signal N
// killed it) once COMMAND's tree has gone; 127 if COMMAND was not found and
// 126 if it could not be started, as a shell's; 2, with a line on stderr,
// for a guard started by hand or with a bad deadline.
func Main(args []string, stderr io.Writer) int {
	control, report := os.NewFile(guardControlFD, "control"), os.NewFile(guardReportFD, "report")
	if len(args) < 3 || args[1] != "--" || !isPipe(control) || !isPipe(report) {
		fmt.Fprintf(stderr, "election %s: the guard of a command is started by election run and election agent, not by hand\n", Command)
		return exitUsage
	}
	deadline, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil {
		fmt.Fprintf(stderr, "election %s: deadline %q: %v\n", Command, args[0], err)
		return exitUsage
	}
	// Caught, not ignored: COMMAND gets the default actions back on exec.
	// The job-control stops are caught so that a SIGTSTP, SIGTTIN or
	// SIGTTOU sent to the guard does not stop it.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	becomeReaper()
	// The pipes are the guard's alone: a COMMAND holding the report pipe
	// would hide the guard's death from election, and could write to it.
	syscall.CloseOnExec(guardControlFD)
	syscall.CloseOnExec(guardReportFD)

	g := &guard{report: report, exited: make(chan int, 1), reaped: make(chan struct{}, 1), gone: make(chan struct{})}
	if untilMonotonic(deadline) <= 0 {
		// Election was paused between reading the deadline and starting
		// the guard: the leadership may be over, so COMMAND must not run.
		fmt.Fprintln(report, "late")
		return exitCannotRun
	}
	pid, code, err := startCommand(args[2:])
	if err != nil {
		fmt.Fprintf(report, "failed %d %s\n", code, strings.ReplaceAll(err.Error(), "\n", " "))
		return code
	}
	g.pid = pid
	fmt.Fprintf(report, "started %d\n", pid)
	go g.reap()
	return g.supervise(readControl(control), deadline)
}

// isPipe reports whether f is an open pipe.
func isPipe(f *os.File) bool {
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeNamedPipe != 0
}

// startCommand starts argv in a new process group with the guard's own
// environment, standard input, output and error. On failure it returns the
// status a shell would: 127 if not found, 126 otherwise.
func startCommand(argv []string) (pid, code int, err error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 0, exitNotFound, err
		}
		return 0, exitCannotRun, err
	}
	pid, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return 0, exitNotFound, err
		}
		return 0, exitCannotRun, err
	}
	return pid, 0, nil
}

// guard is the state of a running guard.
type guard struct {
	pid    int           // COMMAND, the leader of its process group
	report *os.File      // to election
	exited chan int      // COMMAND's status, once it has exited
	reaped chan struct{} // signalled (buffered 1) whenever a child was reaped
	gone   chan struct{} // closed once no child is left

	// groupGone: COMMAND's process group was found empty. Its ID may then
	// be reused for another group, so the guard never signals it again.
	groupGone bool
}

// signalGroup sends sig to COMMAND's process group while it has members.
func (g *guard) signalGroup(sig syscall.Signal) {
	if !g.groupGone && errors.Is(syscall.Kill(-g.pid, sig), syscall.ESRCH) {
		g.groupGone = true
	}
}

// reap waits for every child of the guard, COMMAND and whatever was
// reparented to it, sends COMMAND's status on exited, and closes gone when
// no child is left: then no descendant is left either, since a descendant
// whose parent dies becomes the guard's child.
func (g *guard) reap() {
	defer close(g.gone)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
		case err != nil: // ECHILD: no child left
			return
		default:
			if pid == g.pid {
				g.exited <- statusCode(ws)
			}
			select {
			case g.reaped <- struct{}{}:
			default:
			}
		}
	}
}

// statusCode is a shell's status for ws: the exit code, or 128+N for
// signal N.
func statusCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// control is a message from election; closed is true once the pipe closed.
type control struct {
	verb   string
	arg    int64
	closed bool
}

// controlPipe holds election's messages from the control pipe. The pipe is
// read, under mu and only once it is readable (so that no read blocks), by
// run, which waits for it, and by take, which supervise calls before it
// looks at the deadline: supervise then has every message election wrote
// until that moment, also those a guard that was stopped, and is just
// continued, has not read yet.
type controlPipe struct {
	file  *os.File      // the pipe, kept open while the guard runs
	fd    int           // its file descriptor, in blocking mode
	ready chan struct{} // signalled (buffered 1) when messages were queued

	mu      sync.Mutex
	partial []byte    // the start of a line not complete yet
	queue   []control // the messages read and not taken yet
	closed  bool      // the pipe closed or broke; the last message queued says so
}

// readControl starts reading election's messages from f, the control pipe.
func readControl(f *os.File) *controlPipe {
	p := &controlPipe{file: f, fd: int(f.Fd()), ready: make(chan struct{}, 1)}
	go p.run()
	return p
}

// run waits until the pipe is readable, queues what is there, and signals
// ready, until the pipe closes.
func (p *controlPipe) run() {
	for {
		p.await()
		p.mu.Lock()
		p.fill()
		closed, queued := p.closed, len(p.queue) > 0
		p.mu.Unlock()
		if queued {
			select {
			case p.ready <- struct{}{}:
			default:
			}
		}
		if closed {
			return
		}
	}
}

// await waits until the pipe is readable, closed or broken.
func (p *controlPipe) await() {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// readable reports whether a read of the pipe returns at once: it holds
// data, or it closed or broke.
func (p *controlPipe) readable() bool {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return true // the read reports the error
		default:
			return n > 0
		}
	}
}

// fill reads what the pipe holds now, without waiting, and queues each
// complete line, and a closed message at the pipe's end. p.mu is held.
func (p *controlPipe) fill() {
	var buf [4096]byte
	for !p.closed && p.readable() {
		n, err := unix.Read(p.fd, buf[:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return
		case err != nil || n <= 0:
			p.closed = true
			p.queue = append(p.queue, control{closed: true})
			return
		}
		p.partial = append(p.partial, buf[:n]...)
		for {
			line, rest, ok := bytes.Cut(p.partial, []byte("\n"))
			if !ok {
				break
			}
			verb, arg, _ := strings.Cut(string(line), " ")
			n, _ := strconv.ParseInt(arg, 10, 64)
			p.queue = append(p.queue, control{verb: verb, arg: n})
			p.partial = rest
		}
	}
}

// take returns the messages election has written so far, in order,
// reading what the pipe still holds first.
func (p *controlPipe) take() []control {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fill()
	q := p.queue
	p.queue = nil
	return q
}

// supervise follows election's messages until COMMAND's tree is gone, and
// returns COMMAND's status. The tree is killed at the deadline only if no
// message election wrote before then moved it: a guard stopped past the
// deadline and continued reads the deadlines election sent meanwhile
// before it decides.
func (g *guard) supervise(messages *controlPipe, deadline int64) int {
	timer := time.NewTimer(untilMonotonic(deadline))
	defer timer.Stop()
	code := -1 // COMMAND's status, once known
	for {
		select {
		case code = <-g.exited:
			// Nothing COMMAND started may outlive it: it could act after
			// the key is released.
			return g.killTree(code)
		case <-messages.ready:
		case <-timer.C:
		}
		for _, m := range messages.take() {
			switch {
			case m.closed, m.verb == "kill":
				return g.killTree(code)
			case m.verb == "deadline":
				deadline = m.arg
			case m.verb == "signal":
				g.signalGroup(syscall.Signal(m.arg))
				g.signalGroup(syscall.SIGCONT) // a stopped COMMAND acts on it within its grace
			}
		}
		if wait := untilMonotonic(deadline); wait > 0 {
			timer.Reset(wait)
			continue
		}
		fmt.Fprintln(g.report, "expired")
		return g.killTree(code)
	}
}

// killTree kills COMMAND's process group and every child of the guard,
// again each time a child is reaped, until none is left, and returns
// COMMAND's status (code, if it had exited already). Every descendant still
// alive has an ancestor among the children just killed, so a reaping is
// always to come, and with it the descendants that child left to the guard.
func (g *guard) killTree(code int) int {
	for {
		g.signalGroup(syscall.SIGKILL)
		for _, pid := range children() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-g.reaped:
		case <-g.gone:
			if code < 0 {
				code = <-g.exited
			}
			return code
		}
		select {
		case code = <-g.exited:
		default:
		}
	}
}

// monotonicNow reads CLOCK_MONOTONIC, the clock Go's timers and
// election's validity deadlines run on, shared by every process of the
// machine.
func monotonicNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// untilMonotonic is how long until the CLOCK_MONOTONIC moment ns.
func untilMonotonic(ns int64) time.Duration {
	return time.Duration(ns - monotonicNow())
}

// monotonicAt returns t, a time of this process, as a CLOCK_MONOTONIC
// moment that another process of the machine can wait for. The clock is
// read before t is compared with the present, so that a pause between the
// two makes the moment earlier, never later.
func monotonicAt(t time.Time) int64 {
	now := monotonicNow()
	return now + int64(time.Until(t))
}
