//go:build linux

package testenv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
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
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte(mark)) || !Alive(pid) {
			continue
		}
		if token := tokenOf(pid); token != 0 {
			found[pid] = token
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
