//go:build linux

package cli

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// The tests here run commands that fork, as users' commands do, under
// /bin/sh (dash on Debian, which does not exec the last command of sh -c),
// and kill or pause their election processes: nothing a command started
// may outlive its supervisor's leadership, and no command may run twice at
// once. A watcher looks at every process carrying the command's mark every
// 10 ms for two fencing tokens at once.
//
// Unlike the package's other tests, these run serially (only the forking
// shapes of one test run side by side): they time a killed supervisor's
// command against the 250 ms loss margin, and under the load of the other
// tests running in parallel a kill took 237 ms to take effect.

// leaderOf returns the KVELECT_LEADER or KVELECT_NODE in the environment of
// a process carrying mark with token, and waits until one runs.
func leaderOf(t *testing.T, mark string, newerThan uint64) (name string, token uint64) {
	t.Helper()
	return testenv.Poll(t, fmt.Sprintf("a copy of %s with a token above %d", mark, newerThan), e2e.WaitTimeout, func() (string, bool) {
		for pid, tok := range testenv.Marked(mark) {
			if tok > newerThan {
				token = tok
				return envOf(pid, "KVELECT_LEADER") + envOf(pid, "KVELECT_NODE"), true
			}
		}
		return "", false
	}), token
}

// envOf returns the variable name from the environment of process pid.
func envOf(pid int, name string) string {
	environ, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	for _, v := range strings.Split(string(environ), "\x00") {
		if value, ok := strings.CutPrefix(v, name+"="); ok {
			return value
		}
	}
	return ""
}

// awaitTokenGone waits until no process carrying mark has token, and
// returns how long that took from since.
func awaitTokenGone(t *testing.T, mark string, token uint64, since time.Time) time.Duration {
	t.Helper()
	testenv.Poll(t, fmt.Sprintf("no process of %s with token %d", mark, token), e2e.WaitTimeout, func() (map[int]uint64, bool) {
		m := testenv.Marked(mark)
		for _, tok := range m {
			if tok == token {
				return m, false
			}
		}
		return m, true
	})
	return time.Since(since)
}

// TestRunLeavesNothingOfAKilledCommand runs two election run processes per
// forking shape, SIGKILLs the one whose command runs, and checks that the
// whole command dies with it, within the loss margin, that the other
// process then runs the command, and that it never ran twice at once.
func TestRunLeavesNothingOfAKilledCommand(t *testing.T) {
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "TREE", TTL: 2 * time.Second})
	for i, shape := range testenv.ForkingShapes {
		t.Run(shape.Name, func(t *testing.T) {
			t.Parallel()
			mark := testenv.NewMark()
			watchCopies(t, mark)
			key := fmt.Sprintf("shape%d", i)
			runs := map[string]*e2e.Process{}
			for _, name := range []string{"a", "b"} {
				runs[name] = e2e.StartDaemon(t, bin, name, "--server", s.ClientURL(), "--bucket", "TREE", "--key", key, "--grace", "1s",
					"--", "/bin/sh", "-c", testenv.WithMark(shape.Script, mark))
			}
			first, token := leaderOf(t, mark, 0)
			testenv.AwaitSleeps(t, mark, shape.Sleeps, e2e.WaitTimeout)

			killed := time.Now()
			runs[first].Cmd.Process.Kill()
			took := awaitTokenGone(t, mark, token, killed)
			t.Logf("%s: the command of the killed election run had gone %v after the SIGKILL", shape.Name, took.Round(time.Millisecond))
			if took > 250*time.Millisecond {
				t.Errorf("the command outlived its killed supervisor by %v: want less than the loss margin at a 2s TTL, 250ms", took)
			}
			second, _ := leaderOf(t, mark, token)
			if second == first {
				t.Fatalf("the command ran again under %s, which was killed", first)
			}
			testenv.AwaitSleeps(t, mark, shape.Sleeps, e2e.WaitTimeout)
			other := runs[second]
			other.Cmd.Process.Signal(syscall.SIGTERM)
			other.Wait(t)
			awaitGone(t, mark)
		})
	}
}

// TestRunPausedLosesItsCommandInTime pauses the election run process whose
// command runs, past the TTL: its command's guard kills the command at the
// leadership's work deadline, before the other process takes over. Once
// continued, the paused process stands down and campaigns on.
func TestRunPausedLosesItsCommandInTime(t *testing.T) {
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "TREE", TTL: 2 * time.Second})
	mark := testenv.NewMark()
	watchCopies(t, mark)
	runs := map[string]*e2e.Process{}
	for _, name := range []string{"a", "b"} {
		runs[name] = e2e.StartDaemon(t, bin, name, "--server", s.ClientURL(), "--bucket", "TREE", "--key", "paused",
			"--", "/bin/sh", "-c", testenv.WithMark(`sleep MARK & wait`, mark))
	}
	t.Cleanup(func() {
		// The logs go with the test's temporary directory: a failure
		// keeps them, stamped to the millisecond, to tell what each
		// process did when.
		if t.Failed() {
			for _, name := range slices.Sorted(maps.Keys(runs)) {
				t.Logf("%s's log:\n%s", name, runs[name].Logged(t))
			}
		}
	})
	first, token := leaderOf(t, mark, 0)
	testenv.AwaitSleeps(t, mark, 1, e2e.WaitTimeout)
	paused := runs[first]
	stamp := func(what string) { t.Logf("%s %s", time.Now().UTC().Format("15:04:05.000"), what) } // UTC, as the logs
	stamp(fmt.Sprintf("SIGSTOP to %s, whose command runs with token %d", first, token))
	paused.Cmd.Process.Signal(syscall.SIGSTOP)
	second, secondToken := leaderOf(t, mark, token)
	if second == first {
		t.Fatalf("the command ran again under %s, which is paused", first)
	}
	stamp(fmt.Sprintf("%s's command runs with token %d; SIGCONT to %s", second, secondToken, first))
	paused.Cmd.Process.Signal(syscall.SIGCONT)
	testenv.Eventually(t, "the paused process to log its command's end at the work deadline", e2e.WaitTimeout, func() bool {
		return strings.Contains(paused.Logged(t), "killed at the leadership's work deadline")
	})
	stamp("SIGTERM to " + first)
	paused.Cmd.Process.Signal(syscall.SIGTERM)
	if code := paused.Wait(t); code != ExitOK {
		t.Errorf("the once-paused election run exited %d after SIGTERM, want 0: it no longer ran the command", code)
	}
	stamp("SIGTERM to " + second)
	runs[second].Cmd.Process.Signal(syscall.SIGTERM)
	runs[second].Wait(t)
	awaitGone(t, mark)
}

// TestAgentLeavesNothingOfAKilledDaemon runs three agents with six daemons
// of the forking shapes, SIGKILLs one of them: all it ran
// dies with it, every daemon runs again elsewhere, and none ever runs twice
// at once.
func TestAgentLeavesNothingOfAKilledDaemon(t *testing.T) {
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "TREEFLEET", TTL: 2 * time.Second})
	marks := make([]string, 6)
	args := []string{"--server", s.ClientURL(), "--bucket", "TREEFLEET", "--grace", "1s"}
	for i := range marks {
		marks[i] = testenv.NewMark()
		args = append(args, "--daemon", fmt.Sprintf("d%d=%s", i, testenv.WithMark(testenv.ForkingShapes[i%len(testenv.ForkingShapes)].Script, marks[i])))
	}
	watchCopies(t, marks...)
	agents := map[string]*e2e.Process{}
	for i := range 3 {
		name := fmt.Sprintf("node%d", i)
		agents[name] = e2e.StartProcess(t, bin, name, append([]string{"agent", "--name", name, "--log-format", "json"}, args...)...)
	}
	t.Cleanup(func() {
		// The agents' logs go with the test's temporary directory: a
		// failure keeps them, to tell each daemon's tenures on each node.
		if t.Failed() {
			for _, name := range slices.Sorted(maps.Keys(agents)) {
				t.Logf("%s's log:\n%s", name, agents[name].Logged(t))
			}
		}
	})
	// Placement settles at two daemons a node.
	where := map[string]string{} // mark → node
	tokens := map[string]uint64{}
	testenv.Poll(t, "two daemons running on each node", e2e.WaitTimeout, func() (map[string]string, bool) {
		clear(where)
		loads := map[string]int{}
		for _, mark := range marks {
			for pid, token := range testenv.Marked(mark) {
				where[mark], tokens[mark] = envOf(pid, "KVELECT_NODE"), token
			}
			loads[where[mark]]++
		}
		return where, loads["node0"] == 2 && loads["node1"] == 2 && loads["node2"] == 2
	})
	const busiest = "node1"
	killed := time.Now()
	agents[busiest].Cmd.Process.Kill()
	for _, mark := range marks {
		if where[mark] != busiest {
			continue
		}
		if took := awaitTokenGone(t, mark, tokens[mark], killed); took > 250*time.Millisecond {
			t.Errorf("a daemon outlived its killed agent by %v: want less than the loss margin at a 2s TTL, 250ms", took)
		}
	}
	for _, mark := range marks {
		if where[mark] != busiest {
			continue
		}
		if node, _ := leaderOf(t, mark, tokens[mark]); node == busiest {
			t.Errorf("a daemon of the killed agent %s ran again on it", busiest)
		}
	}
	for name, a := range agents {
		if name != busiest {
			a.Cmd.Process.Signal(syscall.SIGTERM)
			a.Wait(t)
		}
	}
	for _, mark := range marks {
		awaitGone(t, mark)
	}
}

// copyWatch looks every 10 ms at the processes carrying each mark and
// fails the test at every moment (the first ten) at which those of one
// mark carry two different tokens: two copies of one command running at
// once. It fails the test at once, so that the test's own cleanups can
// tell it failed (and keep what explains it).
type copyWatch struct {
	t     *testing.T
	marks []string
	stop  chan struct{}
	done  chan struct{}
}

// watchCopies starts watching marks until the test ends.
func watchCopies(t *testing.T, marks ...string) {
	w := &copyWatch{t: t, marks: marks, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	t.Cleanup(func() {
		close(w.stop)
		<-w.done
	})
}

// run scans until stop is closed.
func (w *copyWatch) run() {
	defer close(w.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	started := time.Now()
	seen := 0
	for {
		for _, mark := range w.marks {
			running := runningAtOnce(testenv.MarkedProcs(mark), sameProcess)
			if tokens := tokensOf(running); len(tokens) > 1 && seen < 10 {
				seen++
				w.t.Errorf("%s ran twice at once %v after the watch began: tokens %v in %s",
					mark, time.Since(started).Round(time.Millisecond), slices.Sorted(maps.Keys(tokens)), describeProcs(running))
			}
		}
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
	}
}

// runningAtOnce returns, of the processes one scan found, those that ran
// at one moment: all of them if they carry one token. One scan takes a
// while, and a process found early may have gone before one found late
// started; so when they carry two tokens or more, each is looked at again
// (still, a function of its ID and start time): each still running was
// running over the whole span from its sighting to now, and so all those
// still running ran together, now. The start time tells a process from a
// later one given its ID again, which would be no copy of the command.
func runningAtOnce(found map[int]testenv.MarkedProc, still func(pid int, start uint64) bool) map[int]testenv.MarkedProc {
	if len(tokensOf(found)) < 2 {
		return found
	}
	running := map[int]testenv.MarkedProc{}
	for pid, p := range found {
		if still(pid, p.Start) {
			running[pid] = p
		}
	}
	return running
}

// TestRunningAtOnceCountsOnlyTheProcessesFoundStillRunning: of a scan that
// found a copy of token 16 early and one of token 51 late, the early one
// ran with the late one only if it is still running: not gone, and not
// replaced by a later process given its ID (the IDs come round), which the
// old recheck, by ID alone, counted as the copy it had found.
func TestRunningAtOnceCountsOnlyTheProcessesFoundStillRunning(t *testing.T) {
	found := map[int]testenv.MarkedProc{100: {Token: 16, Start: 5}, 200: {Token: 51, Start: 9}}
	for _, c := range []struct {
		what string
		now  map[int]uint64 // the start time of each process ID now
		want []uint64
	}{
		{"both still run", map[int]uint64{100: 5, 200: 9}, []uint64{16, 51}},
		{"the early one has gone", map[int]uint64{200: 9}, []uint64{51}},
		{"the early one's ID is another process's", map[int]uint64{100: 12, 200: 9}, []uint64{51}},
	} {
		still := func(pid int, start uint64) bool { return c.now[pid] == start }
		if got := slices.Sorted(maps.Keys(tokensOf(runningAtOnce(found, still)))); !slices.Equal(got, c.want) {
			t.Errorf("%s: tokens running at once %v, want %v", c.what, got, c.want)
		}
	}
	one := map[int]testenv.MarkedProc{100: {Token: 16, Start: 5}, 101: {Token: 16, Start: 6}}
	if got := runningAtOnce(one, func(int, uint64) bool { return false }); len(got) != 2 {
		t.Errorf("the processes of one token: %v, want both as found, none looked at again", got)
	}
}

// sameProcess reports whether process pid, started at start, still runs:
// neither gone, nor a zombie, nor replaced by a later process of its ID.
func sameProcess(pid int, start uint64) bool {
	return testenv.Alive(pid) && testenv.StartTime(pid) == start
}

// tokensOf returns the tokens procs carry.
func tokensOf(procs map[int]testenv.MarkedProc) map[uint64]bool {
	tokens := map[uint64]bool{}
	for _, p := range procs {
		tokens[p.Token] = true
	}
	return tokens
}

// awaitGone waits until no process carries mark.
func awaitGone(t *testing.T, mark string) {
	t.Helper()
	testenv.Poll(t, "no process of "+mark+" left", e2e.WaitTimeout, func() (map[int]uint64, bool) {
		m := testenv.Marked(mark)
		return m, len(m) == 0
	})
}

// describeProcs says of each process its ID, name, state, parent, who ran
// it (KVELECT_NODE of an agent's daemon, KVELECT_LEADER of election run's
// command), its token and start time, and whether it was
// dying already (killed, not yet a zombie): what tells, of two copies at
// once, which agent ran each and whether the older one was still running.
func describeProcs(procs map[int]testenv.MarkedProc) string {
	var out []string
	for _, pid := range slices.Sorted(maps.Keys(procs)) {
		p := procs[pid]
		dying := ""
		if testenv.Dying(pid) {
			dying = ", dying"
		}
		out = append(out, fmt.Sprintf("[%d %s %s parent %d run by %q token %d start %d%s]",
			pid, testenv.Comm(pid), testenv.State(pid), testenv.Parent(pid), envOf(pid, "KVELECT_LEADER")+envOf(pid, "KVELECT_NODE"), p.Token, p.Start, dying))
	}
	return strings.Join(out, " ")
}
