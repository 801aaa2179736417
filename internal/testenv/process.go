//go:build linux

package testenv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The helpers here find, in /proc, the processes of a command a test runs:
// each carries a mark, an argument for sleep no other process has, and a
// fencing token in its environment (KVELECT_TOKEN).

// ForkingShapes are shell commands around "sleep MARK" in which the shell
// does not exec sleep (dash, Debian's /bin/sh, does not even exec the last
// simple command of sh -c): sleep is a grandchild of its supervisor, and
// in some shapes it leaves the process group or is reparented.
var ForkingShapes = []struct {
	Name, Script string
	Sleeps       int // sleep processes once it runs
}{
	{"sleep", `sleep MARK`, 1},
	{"background and wait", `sleep MARK & wait`, 1},
	{"pipeline", `sleep MARK | cat`, 1},
	{"nested shell", `sh -c 'sleep MARK; true'`, 1},
	{"setsid double fork", `(setsid sleep MARK &); sleep MARK`, 2},
}

// NewMark returns an argument for sleep that no other process has: a
// duration of about 12 days with random decimals.
func NewMark() string {
	return fmt.Sprintf("1000000.%09d", rand.N(1_000_000_000))
}

// WithMark returns script with MARK replaced by mark.
func WithMark(script, mark string) string { return strings.ReplaceAll(script, "MARK", mark) }

// Marked returns the live processes (not zombies) whose command line holds
// mark and whose environment has a fencing token, with that token: a
// command's processes, and its guard, but not the election processes whose
// arguments hold the command.
func Marked(mark string) map[int]uint64 {
	found := map[int]uint64{}
	for pid, p := range MarkedProcs(mark) {
		found[pid] = p.Token
	}
	return found
}

// MarkedProc is a process Marked found: its fencing token, and its start
// time, which tells it from a later process given the same ID.
type MarkedProc struct {
	Token uint64
	Start uint64 // clock ticks after boot (StartTime)
}

// MarkedProcs is Marked with each process's start time, read as it was
// found.
func MarkedProcs(mark string) map[int]MarkedProc {
	found := map[int]MarkedProc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		start := StartTime(pid) // before the rest: a process found with it started then
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte(mark)) || !Alive(pid) {
			continue
		}
		if token := tokenOf(pid); token != 0 && StartTime(pid) == start {
			found[pid] = MarkedProc{Token: token, Start: start}
		}
	}
	return found
}

// AwaitSleeps waits up to timeout until n sleep processes carry mark: the
// command runs all it starts.
func AwaitSleeps(t *testing.T, mark string, n int, timeout time.Duration) {
	t.Helper()
	Poll(t, fmt.Sprintf("%d sleep processes of %s", n, mark), timeout, func() (int, bool) {
		sleeps := 0
		for pid := range Marked(mark) {
			if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); string(comm) == "sleep\n" {
				sleeps++
			}
		}
		return sleeps, sleeps >= n
	})
}

// tokenOf returns KVELECT_TOKEN from the environment of process pid, or 0.
func tokenOf(pid int) uint64 {
	environ, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	for _, v := range bytes.Split(environ, []byte{0}) {
		if token, ok := bytes.CutPrefix(v, []byte("KVELECT_TOKEN=")); ok {
			n, _ := strconv.ParseUint(string(token), 10, 64)
			return n
		}
	}
	return 0
}

// Alive reports whether process pid runs: it exists and is not a zombie.
func Alive(pid int) bool {
	state := State(pid)
	return state != "" && state != "Z"
}

// State is process pid's state letter in /proc (R, S, T, Z...), "" if it
// does not exist.
func State(pid int) string {
	if fields := statFields(pid); len(fields) > 0 {
		return fields[0]
	}
	return ""
}

// Parent is the ID of process pid's parent, 0 if pid does not exist.
func Parent(pid int) int {
	fields := statFields(pid)
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// StartTime is when process pid started, in clock ticks after boot (field
// 22 of /proc/PID/stat), 0 if pid does not exist: with the ID, it names one
// process, as IDs are given again once their process is gone.
func StartTime(pid int) uint64 {
	fields := statFields(pid)
	if len(fields) < 20 {
		return 0
	}
	start, _ := strconv.ParseUint(fields[19], 10, 64)
	return start
}

// Dying reports whether process pid has been killed and is ending, though
// not a zombie yet: it has begun to exit (PF_EXITING in its flags), or a
// SIGKILL is pending for it. It runs none of its code any more.
func Dying(pid int) bool {
	fields := statFields(pid)
	if len(fields) < 7 {
		return false
	}
	if flags, _ := strconv.ParseUint(fields[6], 10, 64); flags&pfExiting != 0 {
		return true
	}
	status, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, line := range strings.Split(string(status), "\n") {
		name, mask, ok := strings.Cut(line, ":")
		if !ok || (name != "SigPnd" && name != "ShdPnd") {
			continue
		}
		if bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64); err == nil && bits&(1<<(syscall.SIGKILL-1)) != 0 {
			return true
		}
	}
	return false
}

// pfExiting is the kernel's PF_EXITING process flag: the process is
// exiting.
const pfExiting = 0x4

// Comm is process pid's command name (its /proc comm, as ps shows it), ""
// if pid does not exist.
func Comm(pid int) string {
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSuffix(string(comm), "\n")
}

// statFields are the fields of /proc/PID/stat after the command name,
// which is in parentheses and may hold spaces: the state first, then the
// parent's ID. Nil if pid does not exist.
func statFields(pid int) []string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	return strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
}
