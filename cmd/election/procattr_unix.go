//go:build unix && !linux

package main

import "syscall"

// childProcAttr puts COMMAND in a process group of its own, so that signals
// reach what it starts. Only Linux can have the kernel kill it when this
// process dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
