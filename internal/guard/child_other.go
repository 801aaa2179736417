//go:build !unix

package guard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"
)

// ErrLeadershipEnded is Start's error when the leadership ended before
// COMMAND could start; Start here fails for another reason.
var ErrLeadershipEnded = errors.New("leadership ended before the command could start")

// Child stands for a COMMAND, which election run supervises only on Unix.
type Child struct {
	pid     int
	done    chan struct{}
	expired bool
}

// Start fails: commands run under a guard only on Unix systems.
func Start(context.Context, []string, []string) (*Child, error) {
	return nil, errors.New("election run supervises commands only on Unix systems")
}

// PID is 0: no COMMAND runs.
func (c *Child) PID() int { return c.pid }

// Done is the channel of a COMMAND that never ran.
func (c *Child) Done() <-chan struct{} { return c.done }

// Stop does nothing.
func (c *Child) Stop(syscall.Signal, time.Duration) {}

// Kill does nothing.
func (c *Child) Kill() {}

// GuardPID is 0: no guard runs.
func (c *Child) GuardPID() int { return 0 }

// Killed reports false: no COMMAND ran to be killed.
func (c *Child) Killed() bool { return false }

// Forced reports false: no guard ran to be killed.
func (c *Child) Forced() bool { return false }

// Exited reports true: no COMMAND runs.
func (c *Child) Exited() bool { return true }

// Expired reports whether a guard killed COMMAND at its deadline: never.
func (c *Child) Expired() bool { return c.expired }

// ExitCode is a shell's status for a command it could not run.
func (c *Child) ExitCode() int { return exitCannotRun }

// Main says that the guard runs only on Unix systems, and returns 2.
func Main(_ []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "election: the guard of a command runs only on Unix systems")
	return exitUsage
}
