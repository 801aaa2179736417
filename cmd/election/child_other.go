//go:build !unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"
)

// child stands for a COMMAND, which election run supervises only on Unix.
type child struct {
	pid     int
	done    chan struct{}
	expired bool
}

func startChild(context.Context, []string, []string) (*child, error) {
	return nil, errors.New("election run supervises commands only on Unix systems")
}

func (c *child) stop(syscall.Signal, time.Duration) {}
func (c *child) kill()                              {}
func (c *child) exited() bool                       { return true }
func (c *child) exitCode() int                      { return exitCannotRun }

func guardMain(_ []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "election: the guard of a COMMAND runs only on Unix systems")
	return exitUsage
}
