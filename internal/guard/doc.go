// Package guard runs the COMMANDs of election run and election agent so
// that the command and every process it started are dead before its
// leadership's key can age out, however the supervisor (the election
// process that calls Start) ends: the command exits, leadership ends, the
// supervisor is stopped, SIGKILLed, OOM-killed, panics or is paused. This
// holds whether or not the command execs its program: sh -c 'sleep 9'
// under dash (which does not exec the last command), ./script & wait,
// pipelines, nested shells and programs that start helpers.
//
// Start runs each command under a guard: the supervisor's binary itself,
// started again with Command as its first argument (kvelect-guard in ps),
// between the supervisor and the command. The binary's main, and the
// TestMain of a test binary whose tests start commands, must therefore run
// Main when its first argument is Command.
//
//   - The guard starts the command in a process group of its own and, on
//     Linux, is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever a
//     process of the command leaves behind when it dies (a setsid child, a
//     double-forked daemon) is reparented to the guard instead of to init.
//   - It kills the command's process group and every process reparented to
//     it, again and again until it has no child left, when: the command
//     exits; the supervisor asks (Kill, or Stop once its grace is over); the
//     pipe from the supervisor closes, which the kernel does the moment the
//     supervisor dies, however it dies; or the leadership's work deadline
//     (election.WorkDeadline) passes without the supervisor moving it. The
//     supervisor moves it after each renewal; a paused supervisor cannot, so
//     its command dies on time anyway. Both processes read the machine's
//     monotonic clock.
//   - The guard ignores SIGINT, SIGTERM, SIGHUP and SIGQUIT, and its name
//     does not contain "election": pkill election reaches the supervisor
//     alone, and even pkill -9 election leaves the guards to kill the
//     commands. It keeps its pipes from the command. It exits with the
//     command's status once the tree is gone, and only then is the Child's
//     Done channel closed.
//
// Outside the guarantee:
//
//   - A process that leaves the command's tree altogether: started through
//     another service (systemd-run, at, a container runtime, ssh to another
//     host), or in another PID namespace.
//   - The guard itself killed with SIGKILL (kill -9 of its PID, the OOM
//     killer): the supervisor then kills the command's process group, but
//     what had left the group is out of reach; and if both die at once
//     (pkill -9 -f matching both), nothing kills the command.
//   - A process that cannot die: SIGKILL takes effect only when a process
//     leaves uninterruptible sleep (state D, a hung NFS mount).
//   - The whole machine paused or suspended: the command is paused too, and
//     may act once more when it resumes, before its guard kills it. Fencing
//     tokens are for that.
//   - Systems other than Linux: no subreaper, so the guard kills the
//     command's process group only; a setsid or double-forked process
//     survives there. On systems other than Unix, Start fails.
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
