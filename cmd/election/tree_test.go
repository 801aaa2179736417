//go:build linux

package main

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
)

// forkingShapes are shell commands around "sleep MARK" in which the shell
// does not exec sleep (dash, Debian's /bin/sh, does not even exec the last
// simple command of sh -c): sleep is a grandchild of its supervisor, and
// in some shapes it leaves the process group or is reparented.
var forkingShapes = []struct {
	name, script string
	sleeps       int // sleep processes once it runs
}{
	{"sleep", `sleep MARK`, 1},
	{"background and wait", `sleep MARK & wait`, 1},
	{"pipeline", `sleep MARK | cat`, 1},
	{"nested shell", `sh -c 'sleep MARK; true'`, 1},
	{"setsid double fork", `(setsid sleep MARK &); sleep MARK`, 2},
}

// newMark returns an argument for sleep that no other process has: a
// duration of about 12 days with random decimals.
func newMark() string {
	return fmt.Sprintf("1000000.%09d", rand.N(1_000_000_000))
}

// withMark returns script with MARK replaced by mark.
func withMark(script, mark string) string { return strings.ReplaceAll(script, "MARK", mark) }

// marked returns the live processes (not zombies) whose command line holds
// mark and whose environment has a fencing token, with that token: a
// command's processes, and its guard, but not the election processes whose
// arguments hold the command.
func marked(mark string) map[int]uint64 {
	found := map[int]uint64{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte(mark)) || !alive(pid) {
			continue
		}
		if token := tokenOf(pid); token != 0 {
			found[pid] = token
		}
	}
	return found
}

// awaitSleeps waits until n sleep processes carry mark: the command runs
// all it starts.
func awaitSleeps(t *testing.T, mark string, n int) {
	t.Helper()
	testenv.Poll(t, fmt.Sprintf("%d sleep processes of %s", n, mark), waitTimeout, func() (int, bool) {
		sleeps := 0
		for pid := range marked(mark) {
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

// copyWatch looks every 10 ms at the processes carrying each mark and
// records every moment at which those of one mark carry two different
// tokens: two copies of one command running at once.
type copyWatch struct {
	marks []string
	stop  chan struct{}
	done  chan struct{}

	twice []string // what was seen running twice, and when; read once done is closed
}

// watchCopies starts watching marks until the test ends, and then fails
// the test if any mark ever ran twice at once.
func watchCopies(t *testing.T, marks ...string) {
	w := &copyWatch{marks: marks, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	t.Cleanup(func() {
		close(w.stop)
		<-w.done
		for _, twice := range w.twice {
			t.Error(twice)
		}
	})
}

// run scans until stop is closed.
func (w *copyWatch) run() {
	defer close(w.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	started := time.Now()
	for {
		for _, mark := range w.marks {
			running := map[uint64]bool{}
			procs := marked(mark)
			if len(slices.Compact(slices.Sorted(maps.Values(procs)))) > 1 {
				// One scan takes a while: look again at the processes it
				// found. Each found alive again was alive over the whole
				// span from its first sighting, so two found alive now
				// ran at once.
				for pid := range procs {
					if !alive(pid) {
						delete(procs, pid)
					}
				}
			}
			for _, token := range procs {
				running[token] = true
			}
			if len(running) > 1 && len(w.twice) < 10 {
				w.twice = append(w.twice, fmt.Sprintf("%s ran twice at once %v after the watch began: tokens %v in %s",
					mark, time.Since(started).Round(time.Millisecond), slices.Sorted(maps.Keys(running)), describeProcs(procs)))
			}
		}
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
	}
}

// awaitGone waits until no process carries mark.
func awaitGone(t *testing.T, mark string) {
	t.Helper()
	testenv.Poll(t, "no process of "+mark+" left", waitTimeout, func() (map[int]uint64, bool) {
		m := marked(mark)
		return m, len(m) == 0
	})
}

// describeProcs says of each process its ID, parent, name and token.
func describeProcs(procs map[int]uint64) string {
	var out []string
	for _, pid := range slices.Sorted(maps.Keys(procs)) {
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		out = append(out, fmt.Sprintf("[%s token %d]", strings.TrimSpace(string(stat[:min(len(stat), 60)])), procs[pid]))
	}
	return strings.Join(out, " ")
}
