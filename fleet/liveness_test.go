package fleet_test

import (
	"testing"
	"time"

	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// proxiedFleet makes a fleet on a server of its own and a proxy to it, for
// the nodes to be cut off.
func proxiedFleet(t *testing.T, bucket string) (*testFleet, *faultproxy.Proxy) {
	t.Helper()
	s := testenv.Server(t)
	f := fleetOn(t, s.ClientURL(), jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl})
	p, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return f, p
}

// joinVia joins a node whose connection goes through p.
func (f *testFleet) joinVia(p *faultproxy.Proxy, name string, drain time.Duration, daemons ...string) {
	f.t.Helper()
	url := f.url
	f.url = p.URL()
	defer func() { f.url = url }()
	f.join(name, drain, daemons...)
}

// TestANodeCutOffAndBackGetsItsShareAgain cuts one of three nodes off
// (silently, then loudly), waits for its daemons to run on the other two,
// heals the cut, and waits for the three to share the daemons again, every
// node balanced: no daemon left unplaced, no move left unmade, and the
// ledger sees no daemon on two nodes at once.
func TestANodeCutOffAndBackGetsItsShareAgain(t *testing.T) {
	for _, loud := range []bool{false, true} {
		name := "silent"
		if loud {
			name = "loud"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f, p := proxiedFleet(t, "ATTCUT"+name)
			daemons := names("d", 6)
			f.join("a", 20*time.Millisecond, daemons...)
			f.join("b", 20*time.Millisecond, daemons...)
			f.joinVia(p, "c", 20*time.Millisecond, daemons...)
			f.awaitPlacement("6 daemons over a, b, c", spread(6, "a", "b", "c"))
			for round := range 2 {
				if loud {
					p.Refuse()
				} else {
					p.Blackhole()
				}
				f.gone["c"] = true
				f.awaitPlacement("6 daemons over a, b while c is cut off", spread(6, "a", "b"))
				time.Sleep(ttl) // c's view goes stale further
				p.Heal()
				f.gone["c"] = false
				f.awaitPlacement("6 daemons over a, b, c once c is back", spread(6, "a", "b", "c"))
				t.Logf("round %d: c is back and has its share", round)
			}
		})
	}
}

// TestRestrictedDaemonsAfterLeavesAndCuts gives the daemons
// different sets of nodes (x only on a and c, y only on b and c, the rest
// everywhere), then makes c leave, join again, and a be cut off and come
// back: at each step every daemon must run once, on a node that can run
// it, and every node must end balanced.
func TestRestrictedDaemonsAfterLeavesAndCuts(t *testing.T) {
	t.Parallel()
	f, p := proxiedFleet(t, "ATTRESTRICT")
	f.joinVia(p, "a", 20*time.Millisecond, "x", "z1", "z2", "z3")
	f.join("b", 20*time.Millisecond, "y", "z1", "z2", "z3")
	f.join("c", 20*time.Millisecond, "x", "y", "z1", "z2", "z3")
	all := func(nodes ...string) func(map[string]string, map[string]int) bool {
		can := map[string]map[string]bool{
			"a": {"x": true, "z1": true, "z2": true, "z3": true},
			"b": {"y": true, "z1": true, "z2": true, "z3": true},
			"c": {"x": true, "y": true, "z1": true, "z2": true, "z3": true},
		}
		return func(where map[string]string, loads map[string]int) bool {
			if len(where) != 5 {
				return false
			}
			for d, n := range where {
				if !can[n][d] {
					t.Errorf("%s runs on %s, which cannot run it", d, n)
				}
			}
			for n := range loads {
				ok := false
				for _, m := range nodes {
					ok = ok || m == n
				}
				if !ok {
					return false
				}
			}
			return true
		}
	}
	f.awaitPlacement("5 daemons over a, b, c", all("a", "b", "c"))

	f.gone["c"] = true
	f.nodes["c"].Leave()
	f.awaitPlacement("5 daemons over a, b after c left", all("a", "b"))

	f.gone["c"] = false
	f.join("c", 20*time.Millisecond, "x", "y", "z1", "z2", "z3")
	f.awaitPlacement("5 daemons over a, b, c after c joined again", all("a", "b", "c"))

	p.Blackhole()
	f.gone["a"] = true
	f.awaitPlacement("5 daemons over b, c while a is cut off", all("b", "c"))
	p.Heal()
	f.gone["a"] = false
	where := f.awaitPlacement("5 daemons over a, b, c once a is back", all("a", "b", "c"))
	t.Logf("at the end: %v", where)
}
