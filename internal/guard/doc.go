// Package guard runs the COMMANDs of election run and election agent so
// that the command and every process it started are dead before its
// leadership's key can age out, however the supervisor (the election
// process that calls Start) ends, and whichever single process of the
// chain between them is stopped. That guarantee, its limits, and what
// happens when election, the guard, the command or the whole machine is
// stopped, are stated once, in docs/operations.md ("Nothing the command
// started outlives its supervisor"); this package implements them.
//
// Start runs each command under a guard: the supervisor's binary itself,
// started again with Command as its first argument (kvelect-guard in ps),
// between the supervisor and the command. The binary's main, and the
// TestMain of a test binary whose tests start commands, must therefore run
// Main when its first argument is Command.
//
//   - The guard starts the command in a process group of its own and, on
//     Linux, is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever a
//     process of the command leaves behind when it dies is reparented to
//     the guard instead of to init.
//   - It kills the command's process group and every process reparented to
//     it, again and again until it has no child left, when: the command
//     exits; the supervisor asks (Kill, or Stop once its grace is over); the
//     pipe from the supervisor closes, which the kernel does the moment the
//     supervisor dies; or the leadership's work deadline
//     (election.WorkDeadline) passes without the supervisor moving it; a
//     guard continued after a stop reads the moves waiting in its pipe
//     before it decides. Both processes read the machine's monotonic
//     clock, which does not count a suspend: the supervisor kills the tree
//     itself when the election says the machine slept. A guard started
//     past its deadline does not start the command, and one that has not
//     reported the start by the deadline is killed with what it started
//     (Start returns ErrLeadershipEnded for both).
//   - The supervisor's side, Child, does not rely on the guard to end the
//     tree: Kill, Stop past its grace and the last work deadline of an
//     ended leadership kill the command's process group and every live
//     descendant of the guard (found in /proc) from the supervisor too,
//     then the guard if it is stopped or does not exit within guardConfirm
//     (Forced then reports it).
//   - The guard catches SIGINT, SIGTERM, SIGHUP, SIGQUIT and the job-control
//     stops SIGTSTP, SIGTTIN and SIGTTOU (caught, not ignored, so that the
//     command gets their default actions), and its name does not contain
//     "election", so that pkill election reaches the supervisor alone. It
//     keeps its pipes from the command. It exits with the command's status
//     once the tree is gone, and only then is the Child's Done channel
//     closed.
//
// On systems other than Linux there is no subreaper and no /proc: the
// guard and Child kill the command's process group only. On systems other
// than Unix, Start fails.
package guard

// Command is the hidden command that runs the guard of a COMMAND: the first
// argument with which Start starts the binary again.
const Command = "__guard"

// Exit statuses of the guard itself, for a COMMAND that did not run: a
// shell's for a command it could not run or did not find, and 2 for a guard
// started wrongly (by hand, or with a bad deadline).
const (
	exitUsage     = 2
	exitCannotRun = 126
	exitNotFound  = 127
)
