package guard

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// becomeReaper makes the guard a child subreaper, so that what COMMAND
// starts and leaves is reparented to the guard rather than to init, and
// names the process for ps and top.
func becomeReaper() {
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	os.WriteFile("/proc/self/comm", []byte(guardName), 0)
}

// children returns the IDs of the guard's child processes, found by the
// parent ID of every process in /proc.
func children() []int {
	self := os.Getpid()
	var pids []int
	for _, p := range processes() {
		if p.ppid == self {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// selfExecutable is the path that starts this very binary again, even if
// its file was replaced or removed since it started.
func selfExecutable() string { return "/proc/self/exe" }

// procState is one process as /proc/PID/stat shows it.
type procState struct {
	pid, ppid, pgid int
	zombie          bool
	stopped         bool // by a signal or a debugger
}

// processes lists every process in /proc with its parent and whether it
// is a zombie.
func processes() []procState {
	entries, _ := os.ReadDir("/proc")
	var procs []procState
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			procs = append(procs, p)
		}
	}
	return procs
}

// readProc reads process pid's state and parent from /proc/PID/stat.
func readProc(pid int) (procState, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procState{}, false
	}
	// The state and the parent ID follow the parenthesised name.
	fields := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
	if len(fields) < 3 {
		return procState{}, false
	}
	ppid, _ := strconv.Atoi(string(fields[1]))
	pgid, _ := strconv.Atoi(string(fields[2]))
	state := string(fields[0])
	return procState{pid: pid, ppid: ppid, pgid: pgid, zombie: state == "Z" || state == "X", stopped: state == "T" || state == "t"}, true
}

// isChildOf reports whether process pid exists, alive or a zombie, as a
// child of parent.
func isChildOf(pid, parent int) bool {
	p, ok := readProc(pid)
	return ok && p.ppid == parent
}

// isStopped reports whether process pid is stopped, by a signal or a
// debugger.
func isStopped(pid int) bool {
	p, ok := readProc(pid)
	return ok && p.stopped
}

// stoppedWhole reports whether every thread of process pid is stopped (by
// a signal or a debugger), or pid is a zombie or gone: it runs no more
// code. /proc/PID/stat shows the main thread alone, and a multithreaded
// process (the guard is a Go program) stops thread by thread.
func stoppedWhole(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return true // gone
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(dir + task.Name() + "/stat")
		if err != nil {
			continue // the thread has exited
		}
		fields := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
		if len(fields) == 0 {
			continue
		}
		switch string(fields[0]) {
		case "T", "t", "Z", "X":
		default:
			return false
		}
	}
	return true
}

// groupLeaderChild returns the child of process parent that leads a
// process group of its own, or 0 if it has none.
func groupLeaderChild(parent int) int {
	for _, p := range processes() {
		if p.ppid == parent && p.pgid == p.pid {
			return p.pid
		}
	}
	return 0
}

// descendants returns the live descendants of process root: its children,
// theirs, and so on, zombies left out (but not their descendants).
func descendants(root int) []int {
	children := map[int][]procState{}
	for _, p := range processes() {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var live []int
	next := []int{root}
	for len(next) > 0 {
		parent := next[len(next)-1]
		next = next[:len(next)-1]
		for _, p := range children[parent] {
			if !p.zombie {
				live = append(live, p.pid)
			}
			next = append(next, p.pid)
		}
	}
	return live
}
