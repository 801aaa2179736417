package fleet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsURL is the address of the embedded server the examples use.
var natsURL string

func TestMain(m *testing.M) { testenv.VerifyNoLeaksWithServer(m, &natsURL) }

// awaitTimeout guards against a hang; it is not a speed requirement.
const awaitTimeout = 60 * time.Second

// ttl is the fleet buckets' TTL: the smallest allowed, so that crashes
// fail over fast.
const ttl = 2 * time.Second

// run is one run of a daemon on a node, from its start to its return.
type run struct {
	daemon, node string
	token        uint64
	start, end   time.Time // end is zero while it runs
}

// ledger records every run of every daemon of a test's fleet, and every
// instant two nodes ran the same daemon: it must see none.
type ledger struct {
	t       *testing.T
	mu      sync.Mutex
	runs    []*run
	running map[string]*run // by daemon
}

func newLedger(t *testing.T) *ledger {
	return &ledger{t: t, running: map[string]*run{}}
}

// daemon returns a daemon that runs until its context is cancelled, and
// takes drain to return after that.
func (l *ledger) daemon(name, node string, drain time.Duration) fleet.Daemon {
	return fleet.Daemon{Name: name, Run: func(ctx context.Context) error {
		token, _ := election.TokenFromContext(ctx)
		r := l.begin(name, node, token)
		<-ctx.Done()
		time.Sleep(drain) // the daemon itself: it takes this long to stop
		l.finish(r)
		return nil
	}}
}

func (l *ledger) begin(daemon, node string, token uint64) *run {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &run{daemon: daemon, node: node, token: token, start: time.Now()}
	if other := l.running[daemon]; other != nil {
		l.t.Errorf("daemon %s started on %s (token %d) while it ran on %s (token %d)", daemon, node, token, other.node, other.token)
	}
	for _, earlier := range l.runs {
		if earlier.daemon == daemon && earlier.token >= token {
			l.t.Errorf("daemon %s started on %s with token %d, not above the earlier %d on %s", daemon, node, token, earlier.token, earlier.node)
		}
	}
	l.running[daemon] = r
	l.runs = append(l.runs, r)
	return r
}

func (l *ledger) finish(r *run) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.end = time.Now()
	if l.running[r.daemon] == r {
		delete(l.running, r.daemon)
	}
}

// lastStart returns when the latest run started.
func (l *ledger) lastStart() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[len(l.runs)-1].start
}

// where returns the node running each daemon now.
func (l *ledger) where() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	for d, r := range l.running {
		out[d] = r.node
	}
	return out
}

// awaitPlacement waits until the daemons run with the loads per node that
// ok accepts, and every node of the fleet says it is balanced (nothing left
// to move), and returns where each daemon runs.
func (f *testFleet) awaitPlacement(what string, ok func(where map[string]string, loads map[string]int) bool) map[string]string {
	f.t.Helper()
	return testenv.Poll(f.t, what, awaitTimeout, func() (map[string]string, bool) {
		where := f.ledger.where()
		loads := map[string]int{}
		for _, n := range where {
			loads[n]++
		}
		if !ok(where, loads) {
			return where, false
		}
		for name, n := range f.nodes {
			if !f.gone[name] && !n.Balanced() {
				return where, false
			}
		}
		return where, true
	})
}

// spread accepts n daemons running, with loads within one of each other on
// the nodes given.
func spread(n int, nodes ...string) func(map[string]string, map[string]int) bool {
	return func(where map[string]string, loads map[string]int) bool {
		if len(where) != n {
			return false
		}
		low, high := n, 0
		for _, node := range nodes {
			low, high = min(low, loads[node]), max(high, loads[node])
		}
		return high-low <= 1 && len(loads) == len(nodes)
	}
}

// testFleet is a server with a fleet bucket and nodes joined to it, each on
// its own connection.
type testFleet struct {
	t      *testing.T
	url    string // the servers' client URLs, comma separated
	bucket string
	ledger *ledger
	conns  map[string]*nats.Conn
	nodes  map[string]*fleet.Node
	gone   map[string]bool      // nodes that left or were cut off
	hook   func(election.Event) // if set, every election of every node's bucket reports its events to it
}

func newFleet(t *testing.T, bucket string) *testFleet {
	t.Helper()
	s := testenv.Server(t)
	return fleetOn(t, s.ClientURL(), jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl})
}

// fleetOn makes the fleet's bucket on the servers at url.
func fleetOn(t *testing.T, url string, cfg jetstream.KeyValueConfig) *testFleet {
	t.Helper()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, cfg)
	return &testFleet{t: t, url: url, bucket: cfg.Bucket, ledger: newLedger(t), conns: map[string]*nats.Conn{}, nodes: map[string]*fleet.Node{}, gone: map[string]bool{}}
}

// open opens the fleet's bucket on a connection of its own.
func (f *testFleet) open() (*nats.Conn, *election.Bucket) {
	f.t.Helper()
	nc, js := testenv.Connect(f.t, f.url)
	kv, err := js.KeyValue(context.Background(), f.bucket)
	if err != nil {
		f.t.Fatal(err)
	}
	var opts []election.Option
	if f.hook != nil {
		opts = append(opts, election.WithEventHook(f.hook))
	}
	b, err := election.OpenBucket(context.Background(), kv, opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(b.Close)
	return nc, b
}

// join joins a node that can run the daemons named, each taking drain to
// stop.
func (f *testFleet) join(name string, drain time.Duration, daemons ...string) *fleet.Node {
	f.t.Helper()
	cfg := fleet.Config{Name: name, Logger: testenv.Logger(f.t).With("node", name)}
	for _, d := range daemons {
		cfg.Daemons = append(cfg.Daemons, f.ledger.daemon(d, name, drain))
	}
	return f.joinWith(cfg)
}

func (f *testFleet) joinWith(cfg fleet.Config) *fleet.Node {
	f.t.Helper()
	nc, b := f.open()
	n, err := fleet.Join(context.Background(), b, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(n.Leave)
	f.conns[cfg.Name], f.nodes[cfg.Name] = nc, n
	return n
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// moves counts the daemons that run on another node in after than in before.
func moves(before, after map[string]string) int {
	n := 0
	for d, node := range before {
		if after[d] != node {
			n++
		}
	}
	return n
}

func TestDaemonsSpreadOverTheNodesAndRunOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "SPREAD")
	daemons := names("d", 10)
	for _, n := range []string{"a", "b", "c"} {
		f.join(n, 0, daemons...)
	}
	f.awaitPlacement("10 daemons over a, b, c", spread(10, "a", "b", "c"))
}

func TestAJoinMovesOnlyTheExcess(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "JOIN")
	daemons := names("d", 12)
	for _, n := range []string{"a", "b", "c"} {
		f.join(n, 0, daemons...)
	}
	before := f.awaitPlacement("12 daemons over a, b, c", spread(12, "a", "b", "c"))
	f.join("d", 0, daemons...)
	after := f.awaitPlacement("12 daemons over a, b, c, d", spread(12, "a", "b", "c", "d"))
	if m := moves(before, after); m != 3 {
		t.Errorf("d's join moved %d daemons, want 3 (its share): before %v, after %v", m, before, after)
	}
}

func TestAGracefulLeaveMovesOnlyTheLeaversDaemonsAtOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "LEAVE")
	daemons := names("d", 12)
	for _, n := range []string{"a", "b", "c", "d"} {
		f.join(n, 50*time.Millisecond, daemons...)
	}
	before := f.awaitPlacement("12 daemons over a, b, c, d", spread(12, "a", "b", "c", "d"))
	left := time.Now()
	f.gone["d"] = true
	f.nodes["d"].Leave()
	after := f.awaitPlacement("12 daemons over a, b, c", spread(12, "a", "b", "c"))
	for d, node := range before {
		if node != "d" && after[d] != node {
			t.Errorf("%s moved from %s to %s although only d left", d, node, after[d])
		}
	}
	t.Logf("d's daemons ran elsewhere %v after Leave began (drain 50 ms)", f.ledger.lastStart().Sub(left))
}

func TestACrashedNodesDaemonsMoveOnceItsKeysAgeOut(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "CRASH")
	daemons := names("d", 6)
	for _, n := range []string{"a", "b", "c"} {
		f.join(n, 0, daemons...)
	}
	before := f.awaitPlacement("6 daemons over a, b, c", spread(6, "a", "b", "c"))
	crashed := time.Now()
	f.gone["c"] = true
	f.conns["c"].Close() // c is cut off: it stops its daemons at its deadlines
	after := f.awaitPlacement("6 daemons over a and b", spread(6, "a", "b"))
	for d, node := range before {
		if node != "c" && after[d] != node {
			t.Errorf("%s moved from %s to %s although only c crashed", d, node, after[d])
		}
	}
	t.Logf("c's daemons ran elsewhere %v after it was cut off (TTL %v)", f.ledger.lastStart().Sub(crashed), ttl)
}

func TestADaemonSlowToStopMovesOnlyOnceItReturned(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "DRAIN")
	f.join("a", 500*time.Millisecond, "slow")
	f.awaitPlacement("slow on a", func(where map[string]string, _ map[string]int) bool { return where["slow"] == "a" })
	f.join("b", 0, "slow")
	f.gone["a"] = true
	f.nodes["a"].Leave()
	f.awaitPlacement("slow on b", func(where map[string]string, _ map[string]int) bool { return where["slow"] == "b" })
	// The ledger fails the test if b started it before a's run returned.
}

func TestADrainingDaemonLearnsWhenItsHoldIsLost(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "DRAINLOSS")
	started, revoked, holdEnded := make(chan struct{}), make(chan error, 1), make(chan error, 1)
	a := f.joinWith(fleet.Config{Name: "a", Daemons: []fleet.Daemon{{Name: "d", DrainTimeout: 10 * time.Minute, Run: func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		drain := fleet.DrainContext(ctx)
		revoked <- drain.Err()
		<-drain.Done()
		holdEnded <- context.Cause(ctx)
		return nil
	}}}})
	<-started
	go a.Leave() // revokes d, and returns once it has returned
	if err := <-revoked; err != nil {
		t.Fatalf("the drain context ended with the revoke: %v", err)
	}
	f.conns["a"].Close() // cut off while d drains: its hold ends at a's deadline
	select {
	case cause := <-holdEnded:
		if !errors.Is(cause, fleet.ErrRevoked) {
			t.Errorf("Run's context cause %v, want ErrRevoked", cause)
		}
	case <-time.After(awaitTimeout):
		t.Fatal("the drain context was not done after the node was cut off")
	}
}

func TestADaemonThatReturnsIsStartedAgain(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "RESTART")
	var mu sync.Mutex
	calls := 0
	steady := make(chan struct{})
	f.joinWith(fleet.Config{Name: "a", Daemons: []fleet.Daemon{{Name: "flaky", Run: func(ctx context.Context) error {
		mu.Lock()
		calls++
		call := calls
		mu.Unlock()
		switch call {
		case 1:
			return fmt.Errorf("first run fails")
		case 2:
			panic("second run panics")
		case 3:
			close(steady)
		}
		<-ctx.Done()
		return nil
	}}}})
	select {
	case <-steady:
	case <-time.After(awaitTimeout):
		t.Fatal("the daemon was not started a third time")
	}
	_, b := f.open()
	st := testenv.Poll(t, "the restarts in the daemon's status", awaitTimeout, func() (fleet.DaemonStatus, bool) {
		st, err := fleet.ReadStatus(context.Background(), b)
		if err != nil || len(st.Daemons) != 1 {
			return fleet.DaemonStatus{}, false
		}
		return st.Daemons[0], st.Daemons[0].Restarts == 2
	})
	if st.State != fleet.Running || st.Node != "a" || st.Token == 0 || st.LastError != "fleet: the daemon panicked: second run panics" {
		t.Errorf("status %+v, want flaky running on a with a token and the panic as its last error", st)
	}
}

func TestStatusShowsMembersAndDaemons(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "STATUS")
	f.joinWith(fleet.Config{Name: "a", Capacity: 2, Version: "1.2.3", Labels: map[string]string{"zone": "z1"},
		Daemons: []fleet.Daemon{f.ledger.daemon("x", "a", 0), f.ledger.daemon("y", "a", 0)}})
	_, b := f.open()
	st := testenv.Poll(t, "both daemons running", awaitTimeout, func() (fleet.Status, bool) {
		st, err := fleet.ReadStatus(context.Background(), b)
		return st, err == nil && len(st.Daemons) == 2 && st.Daemons[0].State == fleet.Running && st.Daemons[1].State == fleet.Running
	})
	if len(st.Members) != 1 {
		t.Fatalf("members %+v, want a", st.Members)
	}
	m := st.Members[0]
	if m.Name != "a" || m.Capacity != 2 || m.Version != "1.2.3" || m.Labels["zone"] != "z1" || !slices.Equal(m.Daemons, []string{"x", "y"}) || m.Since.IsZero() {
		t.Errorf("member %+v, want a of capacity 2, version 1.2.3, zone z1, daemons x and y", m)
	}
	for _, d := range st.Daemons {
		if d.Node != "a" || d.Token == 0 || d.Since.IsZero() {
			t.Errorf("daemon %+v, want it on a with a token and a start time", d)
		}
	}
	f.nodes["a"].Leave()
	// With no member left, no daemon is known: a daemon exists while a
	// member can run it or a node holds it.
	testenv.Poll(t, "the fleet empty", awaitTimeout, func() (fleet.Status, bool) {
		st, err := fleet.ReadStatus(context.Background(), b)
		return st, err == nil && len(st.Members) == 0 && len(st.Daemons) == 0
	})
}

func TestWatchMembersReportsJoinsAndLeaves(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "WATCH")
	_, b := f.open()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := fleet.WatchMembers(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	next := func() fleet.MemberEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(awaitTimeout):
			t.Fatal("no member event")
			return fleet.MemberEvent{}
		}
	}
	f.joinWith(fleet.Config{Name: "a", Capacity: 3})
	if ev := next(); !ev.Joined || ev.Member.Name != "a" || ev.Member.Capacity != 3 {
		t.Errorf("%+v, want a joined with capacity 3", ev)
	}
	f.join("b", 0)
	if ev := next(); !ev.Joined || ev.Member.Name != "b" {
		t.Errorf("%+v, want b joined", ev)
	}
	f.nodes["a"].Leave()
	if ev := next(); ev.Joined || ev.Member.Name != "a" {
		t.Errorf("%+v, want a left", ev)
	}
	f.conns["b"].Close()
	if ev := next(); ev.Joined || ev.Member.Name != "b" {
		t.Errorf("%+v, want b gone after it was cut off", ev)
	}
}

func TestJoinRefusesABadConfig(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "BADCONFIG")
	_, b := f.open()
	run := func(context.Context) error { return nil }
	for what, cfg := range map[string]fleet.Config{
		"no name":                 {Daemons: []fleet.Daemon{{Name: "x", Run: run}}},
		"a name with a space":     {Name: "a b"},
		"a negative capacity":     {Name: "a", Capacity: -1},
		"a daemon twice":          {Name: "a", Daemons: []fleet.Daemon{{Name: "x", Run: run}, {Name: "x", Run: run}}},
		"a daemon without Run":    {Name: "a", Daemons: []fleet.Daemon{{Name: "x"}}},
		"a daemon without a name": {Name: "a", Daemons: []fleet.Daemon{{Run: run}}},
		"a daemon name with *":    {Name: "a", Daemons: []fleet.Daemon{{Name: "x*", Run: run}}},
		"a negative drain":        {Name: "a", Daemons: []fleet.Daemon{{Name: "x", Run: run, DrainTimeout: -time.Second}}},
		"a label with =":          {Name: "a", Labels: map[string]string{"a=b": "c"}},
	} {
		if _, err := fleet.Join(context.Background(), b, cfg); !errors.Is(err, fleet.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", what, err)
		}
	}
	if _, err := fleet.Join(context.Background(), nil, fleet.Config{Name: "a"}); !errors.Is(err, fleet.ErrInvalidConfig) {
		t.Errorf("a nil bucket: %v, want ErrInvalidConfig", err)
	}
}

// TestJoinRefusesANameLiveElsewhere joins a second node under a live
// node's name, with other daemons and capacity: Join says at once what it
// waits for, then returns ErrNameTaken (and election.ErrDuplicateName)
// naming both processes within a TTL, and the first node, its record and
// its daemon are untouched, for every node that watches the fleet.
func TestJoinRefusesANameLiveElsewhere(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "NAMETAKEN")
	f.join("a", 0, "x")
	f.join("b", 0, "x")
	f.awaitPlacement("x on a or b", func(where map[string]string, _ map[string]int) bool { return where["x"] != "" })
	_, b := f.open()
	logs := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	began := time.Now()
	_, err := fleet.Join(ctx, b, fleet.Config{Name: "a", Capacity: 5,
		Daemons: []fleet.Daemon{f.ledger.daemon("y", "a-twin", 0)}, Logger: logger})
	if took := time.Since(began); took > b.TTL() {
		t.Errorf("the twin was refused after %v, want within a TTL (%v)", took, b.TTL())
	}
	if !errors.Is(err, fleet.ErrNameTaken) || !errors.Is(err, election.ErrDuplicateName) {
		t.Fatalf("a second live node named a: %v, want ErrNameTaken and election.ErrDuplicateName", err)
	}
	var dup *election.DuplicateError
	if !errors.As(err, &dup) || dup.Key != "fleet.node.a" || dup.Running.Instance == "" || dup.Refused.Instance == dup.Running.Instance ||
		!strings.Contains(err.Error(), dup.Running.String()) || !strings.Contains(err.Error(), dup.Refused.String()) {
		t.Errorf("the refusal %q does not name both processes", err)
	}
	if !strings.Contains(logs.String(), "waiting for it to age out") {
		t.Errorf("the twin did not say what it waited for:\n%s", logs.String())
	}
	// The first a is untouched: still a member with its record, as b sees
	// it too; x did not move.
	if !f.nodes["a"].IsMember() || !f.nodes["a"].Balanced() || !f.nodes["b"].Balanced() {
		t.Errorf("after the refused twin: a member %v, a balanced %v, b balanced %v", f.nodes["a"].IsMember(), f.nodes["a"].Balanced(), f.nodes["b"].Balanced())
	}
	for _, m := range f.nodes["b"].Members() {
		if m.Name == "a" && (m.Capacity != 1 || !slices.Equal(m.Daemons, []string{"x"})) {
			t.Errorf("b sees a as %+v, want a's own record: capacity 1, daemon x", m)
		}
	}
	st, err := fleet.ReadStatus(context.Background(), b)
	if err != nil || len(st.Members) != 2 || st.Members[0].Name != "a" || !slices.Equal(st.Members[0].Daemons, []string{"x"}) {
		t.Errorf("after the refused twin: members %+v (%v), want a with its record, and b", st.Members, err)
	}
}

// TestAFleetOnAClusterSpreadsAndMovesDaemons runs a fleet on a 3-node
// cluster with an R3 bucket: daemons spread, a leave moves only the leaver's
// daemons, and a node cut off loses its daemons to the last one, never two
// runs of a daemon at once.
func TestAFleetOnAClusterSpreadsAndMovesDaemons(t *testing.T) {
	t.Parallel()
	servers := testenv.Cluster(t)
	// A TTL of 5 s leaves a node 625 ms to retry a renewal while the
	// cluster moves a stream's leadership.
	f := fleetOn(t, embedded.ClientURLs(servers), jetstream.KeyValueConfig{Bucket: "CLUSTER", TTL: 5 * time.Second, Replicas: 3})
	daemons := names("d", 9)
	for _, n := range []string{"a", "b", "c"} {
		f.join(n, 20*time.Millisecond, daemons...)
	}
	before := f.awaitPlacement("9 daemons over a, b, c", spread(9, "a", "b", "c"))
	f.gone["c"] = true
	f.nodes["c"].Leave()
	after := f.awaitPlacement("9 daemons over a and b", spread(9, "a", "b"))
	for d, node := range before {
		if node != "c" && after[d] != node {
			t.Errorf("%s moved from %s to %s although only c left", d, node, after[d])
		}
	}
	f.gone["b"] = true
	f.conns["b"].Close()
	f.awaitPlacement("9 daemons on a", spread(9, "a"))
}

// TestNodeNamesAreCandidateNames checks that a node name is valid exactly
// when it is a valid candidate name, and that a refusal carries the
// library's error, which names the allowed characters.
func TestNodeNamesAreCandidateNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "node-1", "a.b", "zone/a", "a=b", "A_9", "", "svc a", ".a", "a.", "a..b", "released:x", "a*", "é"} {
		libErr := election.CheckCandidate(name, "k")
		err := (&fleet.Config{Name: name}).Validate()
		if (err == nil) != (libErr == nil) {
			t.Errorf("name %q: fleet says %v, the library %v", name, err, libErr)
			continue
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, fleet.ErrInvalidConfig) || !errors.Is(err, election.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "allowed: letters, digits and - / _ = .") {
			t.Errorf("name %q: %v; want ErrInvalidConfig, ErrInvalidArgument and the allowed characters", name, err)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a test to share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
