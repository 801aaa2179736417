package main

import "syscall"

// childProcAttr puts COMMAND in a process group of its own, so that signals
// reach what it starts, and has the kernel kill it if this process dies.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
