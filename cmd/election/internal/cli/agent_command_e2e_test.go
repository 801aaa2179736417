//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// daemonEvent is a daemon's start or stop, as the daemon itself recorded it.
type daemonEvent struct {
	daemon, node, what string
	token              uint64
	pid                int
}

// recordingDaemon is a daemon command that records its start, and its stop
// when it gets SIGTERM, in file.
func recordingDaemon(file string) string {
	return fmt.Sprintf(`echo "$KVELECT_DAEMON $KVELECT_NODE $KVELECT_TOKEN $$ start" >> %s; `+
		`trap 'echo "$KVELECT_DAEMON $KVELECT_NODE $KVELECT_TOKEN $$ stop" >> %s; exit 0' TERM; sleep 1000 & wait`, file, file)
}

func readDaemonEvents(file string) []daemonEvent {
	data, _ := os.ReadFile(file)
	var events []daemonEvent
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e daemonEvent
		if _, err := fmt.Sscan(line, &e.daemon, &e.node, &e.token, &e.pid, &e.what); err == nil {
			events = append(events, e)
		}
	}
	return events
}

// runningDaemons replays events: the daemons running (started and neither
// stopped nor dead), by daemon. It fails the test if a daemon starts while
// a run of it that recorded no stop is still alive, or with a token not above
// its previous one.
func runningDaemons(t *testing.T, events []daemonEvent) map[string]daemonEvent {
	t.Helper()
	running := map[string]daemonEvent{}
	last := map[string]uint64{}
	for _, e := range events {
		switch e.what {
		case "start":
			if r, ok := running[e.daemon]; ok && testenv.Alive(r.pid) {
				t.Errorf("%s started on %s (token %d) while it ran on %s (token %d)", e.daemon, e.node, e.token, r.node, r.token)
			}
			if e.token <= last[e.daemon] {
				t.Errorf("%s started on %s with token %d, not above its previous %d", e.daemon, e.node, e.token, last[e.daemon])
			}
			running[e.daemon], last[e.daemon] = e, e.token
		case "stop":
			delete(running, e.daemon)
		}
	}
	for d, r := range running {
		if !testenv.Alive(r.pid) {
			delete(running, d)
		}
	}
	return running
}

// awaitDaemons waits until the daemons run with loads per node that ok
// accepts, and returns where each runs.
func awaitDaemons(t *testing.T, file, what string, ok func(loads map[string]int) bool) map[string]daemonEvent {
	t.Helper()
	return testenv.Poll(t, what, e2e.WaitTimeout, func() (map[string]daemonEvent, bool) {
		running := runningDaemons(t, readDaemonEvents(file))
		loads := map[string]int{}
		for _, r := range running {
			loads[r.node]++
		}
		return running, ok(loads)
	})
}

// TestAgentRunsEachDaemonOnOneOfThreeNodes runs election agent on three
// nodes with six daemons: two run on each; SIGTERM to one agent hands its
// daemons to the others only after they stopped, and it exits 0; SIGKILL to
// another moves its daemons to the last once their keys age out.
func TestAgentRunsEachDaemonOnOneOfThreeNodes(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "AGENT", TTL: 2 * time.Second})
	if _, err := history.Create(context.Background(), js, "AGENT", 0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	events := filepath.Join(dir, "events")
	config := filepath.Join(dir, "daemons.yaml")
	var yaml strings.Builder
	yaml.WriteString("daemons:\n")
	for i := range 4 {
		fmt.Fprintf(&yaml, "  - name: d%d\n    command: %q\n    grace: 5s\n", i, recordingDaemon(events))
	}
	if err := os.WriteFile(config, []byte(yaml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // no daemon outlives the test, even if an agent failed to stop it
		for _, e := range readDaemonEvents(events) {
			if testenv.Alive(e.pid) {
				syscall.Kill(e.pid, syscall.SIGKILL)
			}
		}
	})
	agents := map[string]*e2e.Process{}
	for i := range 3 {
		name := fmt.Sprintf("node%d", i)
		agents[name] = e2e.StartProcess(t, bin, name, "agent", "--name", name, "--log-format", "json", "--server", s.ClientURL(),
			"--bucket", "AGENT", "--config", config, "--label", "zone=z"+name,
			"--daemon", "d4="+recordingDaemon(events), "--daemon", "d5="+recordingDaemon(events))
	}
	twoEach := func(loads map[string]int) bool {
		return loads["node0"] == 2 && loads["node1"] == 2 && loads["node2"] == 2
	}
	awaitDaemons(t, events, "two daemons on each node", twoEach)

	code, stdout, stderr := runCLI(t, "status", "--server", s.ClientURL(), "--bucket", "AGENT", "--json")
	if code != ExitOK {
		t.Fatalf("status: exit %d, %s", code, stderr)
	}
	var nodes, running int
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var v struct {
			Node, Daemon, State string
			Labels              map[string]string
			CanRun              []string `json:"can_run"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("status line %q: %v", line, err)
		}
		switch {
		case v.Node != "" && v.Daemon == "":
			nodes++
			if v.Labels["zone"] != "z"+v.Node || len(v.CanRun) != 6 {
				t.Errorf("node line %q: want its zone label and six daemons it can run", line)
			}
		case v.Daemon != "" && v.State == "running":
			running++
		}
	}
	if nodes != 3 || running != 6 {
		t.Errorf("status shows %d nodes and %d running daemons, want 3 and 6:\n%s", nodes, running, stdout)
	}

	agents["node0"].Cmd.Process.Signal(syscall.SIGTERM)
	if code := agents["node0"].Wait(t); code != ExitOK {
		t.Errorf("agent node0 exited %d after SIGTERM, want 0", code)
	}
	wantLogged(t, agents["node0"].Logged(t), "leaving the fleet", "left the fleet")
	// The agents record in the bucket's history, with no flag: node0's
	// membership, and the daemons it ran.
	testenv.Poll(t, "node0's join and leave in the history", e2e.WaitTimeout, func() (string, bool) {
		got := strings.Join(historyLines(t, s.ClientURL(), "AGENT", "fleet.node.node0"), "; ")
		return got, strings.HasPrefix(got, "node0 won") && strings.HasSuffix(got, "node0 stood_down")
	})
	if got := historyLines(t, s.ClientURL(), "AGENT", "fleet.daemon.d0"); len(got) == 0 || !strings.Contains(got[0], " won ") {
		t.Errorf("the history of daemon d0 is %q, want its wins", got)
	}
	awaitDaemons(t, events, "three daemons on each of node1 and node2", func(loads map[string]int) bool {
		return loads["node1"] == 3 && loads["node2"] == 3
	})

	onNode1 := slices.Collect(func(yield func(int) bool) {
		for _, e := range runningDaemons(t, readDaemonEvents(events)) {
			if e.node == "node1" && !yield(e.pid) {
				return
			}
		}
	})
	agents["node1"].Cmd.Process.Kill()
	agents["node1"].Wait(t)
	for _, pid := range onNode1 { // the kernel kills the daemons with their agent
		e2e.WaitDead(t, pid)
	}
	awaitDaemons(t, events, "all six daemons on node2", func(loads map[string]int) bool { return loads["node2"] == 6 })
}

// TestAgentKillsADrainingDaemonWhenItsHoldIsLost hands over a daemon that
// ignores SIGTERM and has ten minutes of grace (its agent leaves), then
// cuts the agent off from the server: once the agent's hold on the daemon
// has lapsed, another node may start it, so the agent kills it then, not
// at the end of its grace.
func TestAgentKillsADrainingDaemonWhenItsHoldIsLost(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "AGENTLOSS", TTL: 2 * time.Second})
	p, err := faultproxy.New(strings.TrimPrefix(s.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	events := filepath.Join(t.TempDir(), "events")
	stubborn := fmt.Sprintf(`echo "$KVELECT_DAEMON $KVELECT_NODE $KVELECT_TOKEN $$ start" >> %s; trap '' TERM; while :; do sleep 0.1; done`, events)
	agent := e2e.StartProcess(t, bin, "node0", "agent", "--name", "node0", "--log-format", "json", "--server", p.URL(),
		"--bucket", "AGENTLOSS", "--grace", "10m", "--daemon", "d="+stubborn)
	pid := awaitDaemons(t, events, "d on node0", func(loads map[string]int) bool { return loads["node0"] == 1 })["d"].pid
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL) })

	agent.Cmd.Process.Signal(syscall.SIGTERM) // d gets SIGTERM, ignores it, and has its grace
	testenv.Eventually(t, "the agent to hand d over", e2e.WaitTimeout, func() bool {
		return strings.Contains(agent.Logged(t), "stopping the daemon to hand it over")
	})
	p.Blackhole()
	e2e.WaitDead(t, pid)
	agent.Wait(t)
}

func TestAgentRefusesBadDaemons(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "no daemon given"},
		{[]string{"--daemon", "x"}, "want NAME=COMMAND"},
		{[]string{"--daemon", "x= "}, "empty command"},
		{[]string{"--daemon", "x=a", "--daemon", "x=b"}, `daemon "x" is given twice`},
		{[]string{"--daemon", "x*=a"}, "daemon 1 of node"},
		{[]string{"--daemon", "x=a", "--capacity", "0"}, "--capacity 0: want 1 or more"},
		{[]string{"--daemon", "x=a", "--grace", "-1s"}, "--grace -1s"},
		{[]string{"--daemon", "x=a", "--priority", "-1"}, "--priority -1: want 0 (the default: every node equal) or more"},
		{[]string{"--daemon", "x=a", "--name", "a b"}, `node name: election: invalid argument: candidate name "a b": allowed: letters, digits`},
		{[]string{"--daemon", "x=a", "--label", "zone"}, "want KEY=VALUE"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{[]string{"--config", write("typo.yaml", "daemons:\n  - name: x\n    commnd: a\n")}, `line 3: unknown field "commnd" in daemon 1; allowed: name, command, grace, env`},
		{[]string{"--config", write("empty.yaml", "daemons:\n  - name: x\n")}, "empty command"},
		{[]string{"--config", write("grace.yaml", "daemons:\n  - name: x\n    command: a\n    grace: soon\n")}, "soon"},
		{[]string{"--daemon", "x=a", "--config", write("dup.yaml", "daemons:\n  - name: x\n    command: b\n")}, `daemon "x" is given twice`},
		{[]string{"--daemon", "x=a", "--health-cmd", "y=true"}, `--health-cmd y=…: no daemon "y" is given`},
		{[]string{"--daemon", "x=a", "--health-cmd", "x"}, "want NAME=COMMAND, NAME a daemon's"},
		{[]string{"--daemon", "x=a", "--health-cmd", "x= "}, `daemon "x": empty health command`},
		{[]string{"--daemon", "x=a", "--health-cmd", "x=true", "--health-cmd", "x=false"}, `daemon "x": health command given twice`},
		{[]string{"--config", write("health.yaml", "daemons:\n  - name: x\n    command: a\n    health_cmd: true\n"), "--health-cmd", "x=false"},
			`--health-cmd x=…: daemon "x" has a health_cmd in --config already`},
		{[]string{"--daemon", "x=a", "--health-cmd", "x=true", "--health-interval", "1ms"}, "--health-interval 1ms: want at least 10ms"},
		{[]string{"--daemon", "x=a", "--health-cmd", "x=true", "--health-failures", "0"}, "--health-failures 0: want 1 or more"},
		{[]string{"--daemon", "x=a", "--health-interval", "1s"}, "--health-interval and --health-failures are for daemons with a health command"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"agent"}, tc.args...)...)
		if code != ExitUsage || stdout != "" || !strings.Contains(stderr, tc.says) {
			t.Errorf("agent %q: exit %d, stdout %q, stderr %q; want exit 2 saying %q", tc.args, code, stdout, stderr, tc.says)
		}
	}
}

// metricValue returns the value of the series (its name and labels, as
// /metrics writes them) in body, and whether it is there.
func metricValue(body, series string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}

// TestAgentServesFleetMetrics runs two agents, node0 with --metrics and
// daemons a and c (c exits by itself), node1 with daemon b, and scrapes
// node0: a runs here, moved here once; c restarts; b runs elsewhere, and
// once node1 leaves, b runs nowhere for longer and longer.
func TestAgentServesFleetMetrics(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "AGENTMETRICS", TTL: 2 * time.Second})
	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	events := filepath.Join(t.TempDir(), "events")
	t.Cleanup(func() {
		for _, e := range readDaemonEvents(events) {
			if testenv.Alive(e.pid) {
				syscall.Kill(e.pid, syscall.SIGKILL)
			}
		}
	})
	node0 := e2e.StartProcess(t, bin, "node0", "agent", "--name", "node0", "--log-format", "json", "--server", s.ClientURL(),
		"--bucket", "AGENTMETRICS", "--metrics", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--daemon", "a="+recordingDaemon(events), "--daemon", "c=sleep 0.2; exit 3")
	node1 := e2e.StartProcess(t, bin, "node1", "agent", "--name", "node1", "--log-format", "json", "--server", s.ClientURL(),
		"--bucket", "AGENTMETRICS", "--daemon", "b="+recordingDaemon(events))

	scrape := func() string {
		code, body, err := e2e.Get(base + "/metrics")
		if err != nil || code != 200 {
			return ""
		}
		return body
	}
	want := func(what string, ok func(body string) bool) string {
		t.Helper()
		return testenv.Poll(t, what, e2e.WaitTimeout, func() (string, bool) {
			body := scrape()
			return body, ok(body)
		})
	}
	is := func(body, series string, want float64) bool {
		v, ok := metricValue(body, series)
		return ok && v == want
	}
	body := want("a running on node0 and b on node1, two members", func(body string) bool {
		return is(body, `kvelect_fleet_daemon_runs_here{daemon="a",node="node0"}`, 1) &&
			is(body, `kvelect_fleet_daemon_starts_total{daemon="a",node="node0"}`, 1) &&
			is(body, `kvelect_fleet_daemon_runs_here{daemon="b",node="node0"}`, 0) &&
			is(body, `kvelect_fleet_daemon_run_nowhere_seconds{daemon="b",node="node0"}`, 0) &&
			is(body, `kvelect_fleet_daemon_run_nowhere_seconds{daemon="a",node="node0"}`, 0) &&
			is(body, `kvelect_fleet_members{node="node0"}`, 2) &&
			is(body, `kvelect_fleet_node_is_member{node="node0"}`, 1) &&
			is(body, `kvelect_fleet_node_capacity{node="node0"}`, 1) &&
			is(body, `kvelect_fleet_node_priority{node="node0"}`, 0)
	})
	if !is(body, `kvelect_fleet_daemon_restarts_total{daemon="a",node="node0"}`, 0) {
		t.Errorf("no restarts_total of a at 0:\n%s", body)
	}
	want("c restarted on node0", func(body string) bool {
		v, _ := metricValue(body, `kvelect_fleet_daemon_restarts_total{daemon="c",node="node0"}`)
		return v >= 1 && is(body, `kvelect_fleet_daemon_starts_total{daemon="c",node="node0"}`, 1)
	})
	if code, body, err := e2e.Get(base + "/healthz"); err != nil || code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q %v, want 200 ok", code, body, err)
	}
	wantBuildInfo(t, base)

	node1.Cmd.Process.Signal(syscall.SIGTERM)
	if code := node1.Wait(t); code != ExitOK {
		t.Errorf("agent node1 exited %d after SIGTERM, want 0", code)
	}
	series := `kvelect_fleet_daemon_run_nowhere_seconds{daemon="b",node="node0"}`
	var first float64
	want("b to run nowhere for a while, node1 gone", func(body string) bool {
		first, _ = metricValue(body, series)
		return first >= 1 && is(body, `kvelect_fleet_members{node="node0"}`, 1)
	})
	want("b's time running nowhere to grow", func(body string) bool {
		v, _ := metricValue(body, series)
		return v >= first+1
	})

	node0.Cmd.Process.Signal(syscall.SIGTERM)
	if code := node0.Wait(t); code != ExitOK {
		t.Errorf("agent node0 exited %d after SIGTERM, want 0", code)
	}
	wantLogged(t, node0.Logged(t), "serving /metrics and /healthz")
}

// TestAgentShowsACrashLoopingDaemon runs a daemon whose command does not
// exist: status shows it crash-looping, its error "command not found".
func TestAgentShowsACrashLoopingDaemon(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LOOP", TTL: 2 * time.Second})
	e2e.StartProcess(t, bin, "node0", "agent", "--name", "node0", "--log-format", "json", "--server", s.ClientURL(),
		"--bucket", "LOOP", "--daemon", "broken=no-such-command-kvelect")
	row := regexp.MustCompile(`(?m)^broken +node0 +crash-looping +\d+ +\S+ +\d+ \(the daemon exited by itself: command not found \(status 127\)\)$`)
	pollCLI(t, "the daemon crash-looping", row.MatchString, "status", "--server", s.ClientURL(), "--bucket", "LOOP")
}

// TestAgentLogsAGracefulLeaveAsOne starts an agent and stops it with
// SIGTERM: it logs that it joined once, and its daemon handed over, not
// lost.
func TestAgentLogsAGracefulLeaveAsOne(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LEAVE", TTL: 2 * time.Second})
	agent := e2e.StartProcess(t, bin, "node0", "agent", "--name", "node0", "--server", s.ClientURL(),
		"--bucket", "LEAVE", "--daemon", "d=exec sleep 1000", "--grace", "5s")
	testenv.Eventually(t, "the daemon started", e2e.WaitTimeout, func() bool {
		return strings.Contains(agent.Logged(t), "started the daemon")
	})
	agent.Cmd.Process.Signal(syscall.SIGTERM)
	if code := agent.Wait(t); code != 0 {
		t.Fatalf("agent exited %d after SIGTERM, want 0:\n%s", code, agent.Logged(t))
	}
	log := agent.Logged(t)
	if n := strings.Count(log, "joined the fleet"); n != 1 {
		t.Errorf("logged \"joined the fleet\" %d times, want once:\n%s", n, log)
	}
	if strings.Contains(log, "lost the daemon") {
		t.Errorf("a graceful leave logged \"lost the daemon\":\n%s", log)
	}
	if strings.Contains(log, "level=warning") || strings.Contains(log, "level=error") {
		t.Errorf("a graceful leave logged a warning or an error:\n%s", log)
	}
	wantLogged(t, log, "stopping the daemon to hand it over", "let the daemon go", "no longer a member of the fleet: leaving", "left the fleet")
}

// TestAgentHandsDaemonsToAHigherPriority runs two daemons on a standby
// agent of priority 0 with --prefer-higher, then starts a primary of
// priority 1: both daemons move to it, each started there only once it
// stopped on the standby; when the primary leaves, they come back.
func TestAgentHandsDaemonsToAHigherPriority(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "AGENTPRIO", TTL: 2 * time.Second})
	events := filepath.Join(t.TempDir(), "events")
	t.Cleanup(func() {
		for _, e := range readDaemonEvents(events) {
			if testenv.Alive(e.pid) {
				syscall.Kill(e.pid, syscall.SIGKILL)
			}
		}
	})
	agent := func(name string, flags ...string) *e2e.Process {
		args := []string{"agent", "--name", name, "--log-format", "json", "--server", s.ClientURL(), "--bucket", "AGENTPRIO",
			"--daemon", "d0=" + recordingDaemon(events), "--daemon", "d1=" + recordingDaemon(events)}
		return e2e.StartProcess(t, bin, name, append(args, flags...)...)
	}
	standby := agent("standby", "--prefer-higher")
	awaitDaemons(t, events, "both daemons on standby", func(loads map[string]int) bool { return loads["standby"] == 2 })
	primary := agent("primary", "--priority", "1")
	awaitDaemons(t, events, "both daemons on primary", func(loads map[string]int) bool { return loads["primary"] == 2 })
	wantLogged(t, standby.Logged(t), "stopping the daemon to hand it over")
	code, stdout, stderr := runCLI(t, "status", "--server", s.ClientURL(), "--bucket", "AGENTPRIO")
	priorities := regexp.MustCompile(`(?m)^NODE +AGE +CAPACITY +PRIORITY +RUNNING[\s\S]*^primary +\S+ +1 +1 +2/2 [\s\S]*^standby +\S+ +1 +0 prefer-higher +0/2 `)
	if code != ExitOK || !priorities.MatchString(stdout) {
		t.Errorf("election status: exit %d, stderr %q, stdout:\n%s\nwant a PRIORITY column: primary 1, standby 0 prefer-higher", code, stderr, stdout)
	}

	primary.Cmd.Process.Signal(syscall.SIGTERM)
	if code := primary.Wait(t); code != ExitOK {
		t.Errorf("agent primary exited %d after SIGTERM, want 0", code)
	}
	awaitDaemons(t, events, "both daemons back on standby", func(loads map[string]int) bool { return loads["standby"] == 2 })
	// runningDaemons fails the test if a daemon started on one node while
	// its run on the other was alive.
}

// TestAgentMovesADaemonWhoseHealthCommandFails runs daemon d on two agents
// with a health command, test -e on a file per node that the test removes
// on d's node: d moves to the other node (started there only once it
// stopped on the first), and status shows the first node offering nothing.
func TestAgentMovesADaemonWhoseHealthCommandFails(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "AGENTHEALTH", TTL: 2 * time.Second})
	dir := t.TempDir()
	events := filepath.Join(dir, "events")
	t.Cleanup(func() {
		for _, e := range readDaemonEvents(events) {
			if testenv.Alive(e.pid) {
				syscall.Kill(e.pid, syscall.SIGKILL)
			}
		}
	})
	ok := func(node string) string { return filepath.Join(dir, "ok-"+node) }
	config := filepath.Join(dir, "daemons.yaml")
	yaml := fmt.Sprintf("daemons:\n  - name: d\n    command: %q\n    health_cmd: test -e %s/ok-$KVELECT_NODE\n    health_interval: 100ms\n    health_failures: 2\n",
		recordingDaemon(events), dir)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	agents := map[string]*e2e.Process{}
	for _, name := range []string{"node0", "node1"} {
		if err := os.WriteFile(ok(name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		agents[name] = e2e.StartProcess(t, bin, name, "agent", "--name", name, "--log-format", "json", "--server", s.ClientURL(),
			"--bucket", "AGENTHEALTH", "--config", config, "--grace", "5s")
	}
	first := awaitDaemons(t, events, "d on a node", func(loads map[string]int) bool { return len(loads) == 1 })["d"].node
	other := map[string]string{"node0": "node1", "node1": "node0"}[first]

	if err := os.Remove(ok(first)); err != nil {
		t.Fatal(err)
	}
	awaitDaemons(t, events, "d on "+other, func(loads map[string]int) bool { return loads[other] == 1 })
	wantLogged(t, agents[first].Logged(t), "no longer offering the daemon", "stopping the daemon to hand it over", "exited 1")
	code, stdout, stderr := runCLI(t, "status", "--server", s.ClientURL(), "--bucket", "AGENTHEALTH", "--json")
	if code != ExitOK {
		t.Fatalf("status: exit %d, %s", code, stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var v struct {
			Node, Daemon string
			CanRun       []string          `json:"can_run"`
			Unhealthy    map[string]string `json:"unhealthy"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("status line %q: %v", line, err)
		}
		if v.Daemon == "" && v.Node != "" && (v.Node == first) != (len(v.CanRun) == 0) {
			t.Errorf("status line %q: want %s offering nothing and %s offering d", line, first, other)
		}
		if v.Daemon == "" && v.Node != "" && (v.Node == first) != strings.Contains(v.Unhealthy["d"], "exited 1") {
			t.Errorf("status line %q: want %s's unhealthy naming why d's health command fails, and nothing for %s", line, first, other)
		}
	}
	// runningDaemons failed the test if d started on one node while its
	// run on the other was alive.
}
