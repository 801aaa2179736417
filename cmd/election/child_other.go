//go:build !unix

package main

import (
	"errors"
	"os"
	"time"
)

// child stands for a COMMAND, which election run supervises only on Unix.
type child struct {
	pid  int
	done chan struct{}
}

func startChild(argv, env []string) (*child, error) {
	return nil, errors.New("election run supervises commands only on Unix systems")
}

func (c *child) stop(os.Signal, time.Duration)                                       {}
func (c *child) stopSooner(os.Signal, time.Duration, <-chan struct{}, time.Duration) {}
func (c *child) kill()                                                               {}
func (c *child) exited() bool                                                        { return true }
func (c *child) exitCode() int                                                       { return exitCannotRun }
