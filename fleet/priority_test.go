package fleet_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/internal/testenv"
)

// joinAt joins a node of the given priority that can run the daemons
// named, each taking drain to stop.
func (f *testFleet) joinAt(name string, priority int, preferHigher bool, drain time.Duration, daemons ...string) *fleet.Node {
	f.t.Helper()
	cfg := fleet.Config{Name: name, Priority: priority, PreferHigher: preferHigher, Logger: testenv.Logger(f.t).With("node", name)}
	for _, d := range daemons {
		cfg.Daemons = append(cfg.Daemons, f.ledger.daemon(d, name, drain))
	}
	return f.joinWith(cfg)
}

// awaitMembers waits until every node of the fleet that has not left sees
// exactly the members named: placement then works from the same nodes
// everywhere, and Balanced means what a test asserts.
func (f *testFleet) awaitMembers(want ...string) {
	f.t.Helper()
	testenv.Eventually(f.t, "every node to see "+strings.Join(want, ", "), awaitTimeout, func() bool {
		for name, n := range f.nodes {
			if f.gone[name] {
				continue
			}
			var seen []string
			for _, m := range n.Members() {
				seen = append(seen, m.Name)
			}
			if strings.Join(seen, ",") != strings.Join(want, ",") {
				return false
			}
		}
		return true
	})
}

// on accepts the daemons running exactly where want says.
func on(want map[string]string) func(map[string]string, map[string]int) bool {
	return func(where map[string]string, _ map[string]int) bool { return maps.Equal(where, want) }
}

// placed maps each daemon to node.
func placed(node string, daemons ...string) map[string]string {
	out := map[string]string{}
	for _, d := range daemons {
		out[d] = node
	}
	return out
}

// TestAHigherNodeTakesTheDaemonsOfANodeThatPrefersHigher runs every daemon
// on a node of priority 0 that prefers higher priorities, until a node of
// priority 1 joins: the daemons it can run move to it, one run at a time,
// and the one it cannot run stays. When it leaves, they come back.
func TestAHigherNodeTakesTheDaemonsOfANodeThatPrefersHigher(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "PREFERHIGHER")
	daemons := names("d", 4)
	f.joinAt("standby", 0, true, 50*time.Millisecond, daemons...)
	f.awaitPlacement("every daemon on standby", on(placed("standby", daemons...)))

	f.joinAt("primary", 1, false, 50*time.Millisecond, daemons[:3]...) // not d03
	f.awaitMembers("primary", "standby")
	want := placed("primary", daemons[:3]...)
	want["d03"] = "standby"
	f.awaitPlacement("d00-d02 on primary, d03 on standby", on(want))

	f.gone["primary"] = true
	f.nodes["primary"].Leave()
	f.awaitPlacement("every daemon back on standby", on(placed("standby", daemons...)))
	// The ledger fails the test if a daemon ran on both nodes at once.
}

// TestAHigherNodeLeavesRunningDaemonsWhereTheyAre runs every daemon on a
// node of priority 0 without prefer-higher: a node of priority 1 joining
// moves none (nor does a second node of priority 0), and takes them all
// once the first leaves, the second node of priority 0 none; when the node
// of priority 1 is cut off, they fall back to the second node of priority 0.
func TestAHigherNodeLeavesRunningDaemonsWhereTheyAre(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "KEEP")
	daemons := names("d", 4)
	f.joinAt("standby", 0, false, 0, daemons...)
	f.awaitPlacement("every daemon on standby", on(placed("standby", daemons...)))

	f.joinAt("primary", 1, false, 0, daemons...)
	f.joinAt("standby2", 0, false, 0, daemons...)
	f.awaitMembers("primary", "standby", "standby2")
	f.awaitPlacement("every daemon still on standby", on(placed("standby", daemons...)))

	f.gone["standby"] = true
	f.nodes["standby"].Leave()
	f.awaitPlacement("every daemon on primary", on(placed("primary", daemons...)))

	// The primary is cut off: its daemons fall back to standby2 once their
	// keys age out.
	f.gone["primary"] = true
	f.conns["primary"].Close()
	f.awaitPlacement("every daemon on standby2", on(placed("standby2", daemons...)))
}

// TestFleetKeysIgnoreTheBucketsPriorityDefaults joins nodes through buckets
// opened with election.WithPriority(0), which never claims, and
// election.WithPreferHigher: the fleet's elections override both, so the
// nodes join and their daemons run and move by placement alone.
func TestFleetKeysIgnoreTheBucketsPriorityDefaults(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "DEFAULTS")
	join := func(name string, priority int, daemons ...string) {
		nc, js := testenv.Connect(t, f.url)
		kv, err := js.KeyValue(context.Background(), f.bucket)
		if err != nil {
			t.Fatal(err)
		}
		b, err := election.OpenBucket(context.Background(), kv, election.WithPriority(priority), election.WithPreferHigher(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		cfg := fleet.Config{Name: name, Logger: testenv.Logger(t).With("node", name)}
		for _, d := range daemons {
			cfg.Daemons = append(cfg.Daemons, f.ledger.daemon(d, name, 0))
		}
		ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
		defer cancel()
		n, err := fleet.Join(ctx, b, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Leave)
		f.conns[name], f.nodes[name] = nc, n
	}
	daemons := names("d", 4)
	join("a", 0, daemons...)
	f.awaitPlacement("every daemon on a", on(placed("a", daemons...)))
	join("b", 5, daemons...)
	f.awaitPlacement("the daemons spread over a and b", spread(4, "a", "b"))
}

func TestJoinRefusesANegativePriority(t *testing.T) {
	t.Parallel()
	err := (&fleet.Config{Name: "a", Priority: -1}).Validate()
	if !errors.Is(err, fleet.ErrInvalidConfig) || !strings.Contains(err.Error(), "priority -1 of node \"a\": want 0") {
		t.Errorf("priority -1: %v, want ErrInvalidConfig naming the priority and what is allowed", err)
	}
}

func TestStatusShowsPriorities(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "PRIOSTATUS")
	f.joinAt("a", 3, true, 0)
	f.joinAt("b", 0, false, 0)
	_, b := f.open()
	st := testenv.Poll(t, "both members", awaitTimeout, func() (fleet.Status, bool) {
		st, err := fleet.ReadStatus(context.Background(), b)
		return st, err == nil && len(st.Members) == 2
	})
	if a, b := st.Members[0], st.Members[1]; a.Priority != 3 || !a.PreferHigher || b.Priority != 0 || b.PreferHigher {
		t.Errorf("members %+v, want a at 3 preferring higher, b at 0", st.Members)
	}
}
