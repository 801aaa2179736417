//go:build unix

package main

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// child is a running COMMAND, the leader of its own process group.
type child struct {
	pid   int
	done  chan struct{}    // closed once COMMAND has exited and its group was killed
	state *os.ProcessState // set before done is closed
}

// startChild starts argv with env in a new process group that the kernel
// kills if this process dies (Linux), and reaps it in the background.
func startChild(argv, env []string) (*child, error) {
	c := &child{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The kernel sends the parent-death signal when the thread that
		// started the child exits, not only the process: hold the thread
		// until the child has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = childProcAttr()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		c.pid = cmd.Process.Pid
		started <- nil
		cmd.Wait()
		c.state = cmd.ProcessState
		// Nothing COMMAND started may outlive it: it could act after the
		// key is released.
		syscall.Kill(-c.pid, syscall.SIGKILL)
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// stop sends sig to COMMAND's process group, and SIGKILL if COMMAND has not
// exited after grace. It returns once COMMAND has exited.
func (c *child) stop(sig os.Signal, grace time.Duration) { c.stopSooner(sig, grace, nil, 0) }

// stopSooner is stop, except that SIGKILL comes within urgent of lost
// closing, if that is sooner than grace.
func (c *child) stopSooner(sig os.Signal, grace time.Duration, lost <-chan struct{}, urgent time.Duration) {
	syscall.Kill(-c.pid, sig.(syscall.Signal))
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-lost:
			lost = nil
			timer.Reset(urgent)
			continue
		case <-timer.C:
		}
		c.kill()
		<-c.done
		return
	}
}

// kill sends SIGKILL to COMMAND's process group.
func (c *child) kill() {
	syscall.Kill(-c.pid, syscall.SIGKILL)
}

// exited reports whether COMMAND has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// exitCode is COMMAND's exit status, 128+N if signal N killed it, as a
// shell reports it. COMMAND must have exited.
func (c *child) exitCode() int {
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return c.state.ExitCode()
}
