package fleet

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

// nodesOf makes members that can run every daemon, with the capacities
// given (by name n0, n1, …).
func nodesOf(daemons []string, capacities ...int) []placeNode {
	nodes := make([]placeNode, len(capacities))
	for i, c := range capacities {
		can := map[string]bool{}
		for _, d := range daemons {
			can[d] = true
		}
		nodes[i] = placeNode{name: fmt.Sprintf("n%d", i), capacity: c, canRun: can}
	}
	return nodes
}

func daemonNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("d%02d", i)
	}
	return names
}

// loads counts the daemons placed on each node.
func loads(target map[string]string) map[string]int {
	l := map[string]int{}
	for _, n := range target {
		l[n]++
	}
	return l
}

// moved counts the daemons whose node differs between two placements.
func moved(before, after map[string]string) int {
	n := 0
	for d, node := range after {
		if before[d] != "" && before[d] != node {
			n++
		}
	}
	return n
}

func TestPlaceSpreadsEqualCapacitiesWithinOne(t *testing.T) {
	for _, tc := range []struct{ daemons, nodes int }{{10, 3}, {7, 7}, {3, 5}, {100, 20}, {1, 1}} {
		daemons := daemonNames(tc.daemons)
		caps := slices.Repeat([]int{1}, tc.nodes)
		target := place(placeInput{nodes: nodesOf(daemons, caps...), daemons: daemons, holders: map[string]string{}})
		if len(target) != tc.daemons {
			t.Errorf("%d daemons on %d nodes: placed %d", tc.daemons, tc.nodes, len(target))
		}
		low, high := tc.daemons/tc.nodes, (tc.daemons+tc.nodes-1)/tc.nodes
		for i := range tc.nodes {
			if l := loads(target)[fmt.Sprintf("n%d", i)]; l < low || l > high {
				t.Errorf("%d daemons on %d nodes: n%d runs %d, want %d or %d", tc.daemons, tc.nodes, i, l, low, high)
			}
		}
	}
}

func TestPlaceMovesOnlyTheExcessToAJoiner(t *testing.T) {
	daemons := daemonNames(12)
	before := place(placeInput{nodes: nodesOf(daemons, 1, 1, 1), daemons: daemons, holders: map[string]string{}})
	after := place(placeInput{nodes: nodesOf(daemons, 1, 1, 1, 1), daemons: daemons, holders: before})
	if l := loads(after); l["n0"] != 3 || l["n1"] != 3 || l["n2"] != 3 || l["n3"] != 3 {
		t.Errorf("after n3 joined: loads %v, want 3 each", l)
	}
	if m := moved(before, after); m != 3 {
		t.Errorf("n3's join moved %d daemons, want 3 (its share)", m)
	}
}

func TestPlaceMovesOnlyTheLeaversDaemons(t *testing.T) {
	daemons := daemonNames(12)
	before := place(placeInput{nodes: nodesOf(daemons, 1, 1, 1, 1), daemons: daemons, holders: map[string]string{}})
	holders := maps.Clone(before)
	previous := map[string]string{}
	for d, n := range holders {
		if n == "n3" {
			delete(holders, d)
			previous[d] = n
		}
	}
	after := place(placeInput{nodes: nodesOf(daemons, 1, 1, 1), daemons: daemons, holders: holders, previous: previous})
	for d, n := range before {
		if n != "n3" && after[d] != n {
			t.Errorf("%s moved from %s to %s although only n3 left", d, n, after[d])
		}
	}
	if l := loads(after); l["n0"] != 4 || l["n1"] != 4 || l["n2"] != 4 {
		t.Errorf("after n3 left: loads %v, want 4 each", l)
	}
}

func TestPlaceFollowsCapacity(t *testing.T) {
	daemons := daemonNames(12)
	target := place(placeInput{nodes: nodesOf(daemons, 1, 2, 3), daemons: daemons, holders: map[string]string{}})
	if l := loads(target); l["n0"] != 2 || l["n1"] != 4 || l["n2"] != 6 {
		t.Errorf("capacities 1, 2, 3: loads %v, want 2, 4, 6", l)
	}
	// From a lopsided start, moves stop once each is within one of its share.
	lopsided := map[string]string{}
	for _, d := range daemons {
		lopsided[d] = "n0"
	}
	target = place(placeInput{nodes: nodesOf(daemons, 1, 2, 3), daemons: daemons, holders: lopsided})
	if l := loads(target); abs(l["n0"]-2) > 1 || abs(l["n1"]-4) > 1 || abs(l["n2"]-6) > 1 {
		t.Errorf("capacities 1, 2, 3 from all on n0: loads %v, want within one of 2, 4, 6", l)
	}
}

func abs(n int) int { return max(n, -n) }

func TestPlaceKeepsDaemonsOnNodesThatCanRunThem(t *testing.T) {
	daemons := daemonNames(6)
	nodes := nodesOf(daemons, 1, 1)
	nodes[1].canRun = map[string]bool{"d00": true}
	target := place(placeInput{nodes: nodes, daemons: daemons, holders: map[string]string{}})
	for d, n := range target {
		if n == "n1" && d != "d00" {
			t.Errorf("%s placed on n1, which cannot run it", d)
		}
	}
	if len(target) != 6 {
		t.Errorf("placed %d of 6", len(target))
	}
	// A daemon held by a node that is not a member stays out of the plan.
	target = place(placeInput{nodes: nodesOf(daemons, 1), daemons: daemons, holders: map[string]string{"d01": "gone"}})
	if n, ok := target["d01"]; ok {
		t.Errorf("d01, held by a node that left, placed on %s", n)
	}
}

func TestPlaceGivesAFreedDaemonToAnotherNodeFirst(t *testing.T) {
	daemons := daemonNames(2)
	target := place(placeInput{nodes: nodesOf(daemons, 1, 1), daemons: daemons,
		holders: map[string]string{"d01": "n1"}, previous: map[string]string{"d00": "n0"}})
	if target["d00"] != "n1" {
		t.Errorf("d00, which n0 gave up, placed on %s; want n1", target["d00"])
	}
	target = place(placeInput{nodes: nodesOf(daemons, 1), daemons: daemons,
		holders: map[string]string{}, previous: map[string]string{"d00": "n0"}})
	if target["d00"] != "n0" {
		t.Errorf("d00, with n0 the only member, placed on %q; want n0", target["d00"])
	}
}

// BenchmarkPlace computes the placement of 1,000 daemons over 20 nodes,
// every node computing it after each change it sees: a balanced fleet, and
// one whose daemons all run on one node (the most moves to compute); and,
// with half the nodes at priority 1, a fleet balanced over those.
//
//	go test -run '^$' -bench Place ./fleet
func BenchmarkPlace(b *testing.B) {
	daemons := daemonNames(1000)
	nodes := nodesOf(daemons, slices.Repeat([]int{1}, 20)...)
	balanced, piled := map[string]string{}, map[string]string{}
	for i, d := range daemons {
		balanced[d] = nodes[i%len(nodes)].name
		piled[d] = nodes[0].name
	}
	for name, holders := range map[string]map[string]string{"balanced": balanced, "piled": piled} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				place(placeInput{nodes: nodes, daemons: daemons, holders: holders})
			}
		})
	}
	tiered := nodesOf(daemons, slices.Repeat([]int{1}, 20)...)
	onHigh := map[string]string{}
	for i := range tiered {
		tiered[i].priority = i % 2
	}
	for i, d := range daemons {
		onHigh[d] = tiered[1+2*(i%10)].name
	}
	b.Run("tiered", func(b *testing.B) {
		for b.Loop() {
			place(placeInput{nodes: tiered, daemons: daemons, holders: onHigh})
		}
	})
}

// withPriorities sets the members' priorities, in order, and which of them
// prefer higher priorities.
func withPriorities(nodes []placeNode, priorities []int, prefer ...string) []placeNode {
	for i := range nodes {
		nodes[i].priority = priorities[i]
		nodes[i].preferHigher = slices.Contains(prefer, nodes[i].name)
	}
	return nodes
}

// allOn holds every daemon on node.
func allOn(daemons []string, node string) map[string]string {
	holders := map[string]string{}
	for _, d := range daemons {
		holders[d] = node
	}
	return holders
}

func TestPlacePutsDaemonsOnlyOnTheHighestPriority(t *testing.T) {
	daemons := daemonNames(6)
	nodes := withPriorities(nodesOf(daemons, 1, 1, 1), []int{0, 2, 2})
	target := place(placeInput{nodes: nodes, daemons: daemons, holders: map[string]string{}})
	if l := loads(target); l["n0"] != 0 || l["n1"] != 3 || l["n2"] != 3 {
		t.Errorf("n0 at 0, n1 and n2 at 2: loads %v, want 0, 3, 3", l)
	}
	// A daemon that no node of the highest priority can run falls back to
	// the highest that can.
	nodes = withPriorities(nodesOf(daemons, 1, 1, 1), []int{0, 1, 2})
	nodes[2].canRun = map[string]bool{"d00": true, "d01": true}
	nodes[1].canRun = map[string]bool{"d02": true}
	target = place(placeInput{nodes: nodes, daemons: daemons, holders: map[string]string{}})
	want := map[string]string{"d00": "n2", "d01": "n2", "d02": "n1", "d03": "n0", "d04": "n0", "d05": "n0"}
	if !maps.Equal(target, want) {
		t.Errorf("placed %v, want %v", target, want)
	}
	// Equal priorities, whatever their value, place as no priorities do.
	plain := place(placeInput{nodes: nodesOf(daemons, 1, 2, 3), daemons: daemons, holders: map[string]string{}})
	equal := place(placeInput{nodes: withPriorities(nodesOf(daemons, 1, 2, 3), []int{7, 7, 7}), daemons: daemons, holders: map[string]string{}})
	if !maps.Equal(plain, equal) {
		t.Errorf("priorities all 7: placed %v, without priorities %v", equal, plain)
	}
}

func TestPlaceKeepsDaemonsOnALowerNodeUnlessItPrefersHigher(t *testing.T) {
	daemons := daemonNames(6)
	holders := allOn(daemons, "n0")
	// n0 (priority 0) runs everything, n1 (priority 1) joins: n0 keeps its
	// daemons, and they do not move for balance either.
	target := place(placeInput{nodes: withPriorities(nodesOf(daemons, 1, 1), []int{0, 1}), daemons: daemons, holders: holders})
	if !maps.Equal(target, holders) {
		t.Errorf("without prefer-higher: placed %v, want all kept on n0", target)
	}
	// Nor within n0's priority: another node of priority 0 joining takes
	// none while a higher one is live.
	target = place(placeInput{nodes: withPriorities(nodesOf(daemons, 1, 1, 1), []int{0, 1, 0}), daemons: daemons, holders: holders})
	if !maps.Equal(target, holders) {
		t.Errorf("without prefer-higher, n2 at 0 joining: placed %v, want all kept on n0", target)
	}
	// A daemon freed meanwhile goes to n1.
	freed := maps.Clone(holders)
	delete(freed, "d05")
	target = place(placeInput{nodes: withPriorities(nodesOf(daemons, 1, 1), []int{0, 1}), daemons: daemons, holders: freed,
		previous: map[string]string{"d05": "n0"}})
	if target["d05"] != "n1" {
		t.Errorf("d05 freed: placed on %q, want n1", target["d05"])
	}
	// With prefer-higher, every daemon goes to the nodes of priority 1,
	// spread over them.
	target = place(placeInput{nodes: withPriorities(nodesOf(daemons, 1, 1, 1), []int{0, 1, 1}, "n0"), daemons: daemons, holders: holders})
	if l := loads(target); l["n0"] != 0 || l["n1"] != 3 || l["n2"] != 3 {
		t.Errorf("n0 prefers higher: loads %v, want 0, 3, 3", l)
	}
	// Only the holder's preference counts: n1 preferring higher does not
	// move n0's daemons.
	target = place(placeInput{nodes: withPriorities(nodesOf(daemons, 1, 1), []int{0, 1}, "n1"), daemons: daemons, holders: holders})
	if !maps.Equal(target, holders) {
		t.Errorf("only n1 prefers higher: placed %v, want all kept on n0", target)
	}
}

func TestPlaceFallsBackToLowerPrioritiesWhenTheHigherLeave(t *testing.T) {
	daemons := daemonNames(6)
	before := place(placeInput{nodes: withPriorities(nodesOf(daemons, 1, 1, 1), []int{0, 0, 1}), daemons: daemons, holders: map[string]string{}})
	if l := loads(before); l["n2"] != 6 {
		t.Fatalf("n2 the only node at 1: loads %v, want all 6 on n2", l)
	}
	// n2 leaves: its daemons are free, and spread over n0 and n1.
	previous := maps.Clone(before)
	after := place(placeInput{nodes: withPriorities(nodesOf(daemons, 1, 1), []int{0, 0}), daemons: daemons,
		holders: map[string]string{}, previous: previous})
	if l := loads(after); l["n0"] != 3 || l["n1"] != 3 {
		t.Errorf("after n2 left: loads %v, want 3 each on n0 and n1", l)
	}
}
