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
	ppid := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The parent ID is the second field after the parenthesised name.
		fields := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
		if len(fields) > 1 && string(fields[1]) == ppid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// selfExecutable is the path that starts this very binary again, even if
// its file was replaced or removed since it started.
func selfExecutable() string { return "/proc/self/exe" }
