//go:build unix

package check

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvelect/election/cmd/chaos/record"
)

// supercluster is the harness's record of a -supercluster run with one
// worker in each region, w1 in C1 (the home), w2 in C2 and w3 in C3, and
// the cuts given.
func superclusterRun(workers map[string][]record.Event, cuts ...record.Event) map[string][]record.Event {
	harness := []record.Event{
		{T: 1, Kind: "topology", Target: "C1"},
		{T: 2, Kind: "spawn", Target: "w1", Region: "C1"},
		{T: 3, Kind: "spawn", Target: "w2", Region: "C2"},
		{T: 4, Kind: "spawn", Target: "w3", Region: "C3"},
	}
	return baseRun(workers, append(harness, cuts...)...)
}

// cutOf returns the harness's record of region cut off from from to to.
func cutOf(region, how string, from, to int64) []record.Event {
	return []record.Event{{T: from, Kind: "region-cut", Target: region, Cause: how}, {T: to, Kind: "region-heal", Target: region}}
}

// TestCheckCutsFindsALeaderElsewhereWhileTheHomeRegionIsCut is the
// mutation the rule exists for: while C1, the bucket's home, is cut off,
// w2 in C2 announces a win whose write it sent during the cut, as a
// topology whose gateways let writes around the cut would. The checker
// counts it and fails the run; w1's win in C1 at the same time is
// reachable and passes.
func TestCheckCutsFindsALeaderElsewhereWhileTheHomeRegionIsCut(t *testing.T) {
	cut := cutOf("C1", "blackhole", 2*sec, 6*sec)
	dir := writeRun(t, superclusterRun(map[string][]record.Event{
		"w1": leaderTerm(1, 3*sec, 3100e6, nil, 3500e6),
		"w2": leaderTerm(3, 4*sec, 4100e6, nil, 4500e6),
	}, cut...))
	rep, err := Dir(dir, ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	if rep.CutLeaders != 1 || rep.OK() {
		t.Fatalf("%d leaders across the cut, ok %v; want 1 (w2's), not ok (problems %v)", rep.CutLeaders, rep.OK(), rep.Problems)
	}
	if !slices.ContainsFunc(rep.Problems, func(p string) bool { return strings.Contains(p, "w2 (region C2) announced token 3") }) {
		t.Errorf("no problem names w2's win: %v", rep.Problems)
	}

	// Without the win across the cut, the same run passes.
	dir = writeRun(t, superclusterRun(map[string][]record.Event{
		"w1": leaderTerm(1, 3*sec, 3100e6, nil, 3500e6),
	}, cut...))
	if rep, err = Dir(dir, ttl2s); err != nil {
		t.Fatal(err)
	}
	if rep.CutLeaders != 0 || !rep.OK() {
		t.Errorf("%d leaders across the cut, ok %v; want 0, ok (problems %v)", rep.CutLeaders, rep.OK(), rep.Problems)
	}
}

// TestCheckCutsCountsOnlyWinsOutOfTheBucketsReach runs each kind of cut
// against wins in each region and at each time.
func TestCheckCutsCountsOnlyWinsOutOfTheBucketsReach(t *testing.T) {
	for _, tc := range []struct {
		name         string
		region, how  string
		worker       string
		sent, won    int64
		acrossTheCut bool
	}{
		{"a remote region cut: its worker wins", "C2", "blackhole", "w2", 3 * sec, 3100e6, true},
		{"a remote region cut loudly: its worker wins", "C2", "loud", "w2", 3 * sec, 3100e6, true},
		{"a remote region cut: the home's worker wins", "C2", "blackhole", "w1", 3 * sec, 3100e6, false},
		{"a remote region cut: another remote region's worker wins", "C2", "blackhole", "w3", 3 * sec, 3100e6, false},
		{"the home cut: a remote worker wins", "C1", "loud", "w3", 3 * sec, 3100e6, true},
		{"the home server down: its own worker wins", "C1", "down", "w1", 3 * sec, 3100e6, true},
		{"a remote server down: the home's worker wins", "C3", "down", "w1", 3 * sec, 3100e6, false},
		{"the write sent before the cut, answered within it", "C2", "blackhole", "w2", 1900e6, 2100e6, false},
		{"the write sent within the cut, the win after the heal", "C2", "blackhole", "w2", 3 * sec, 6100e6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRun(t, superclusterRun(map[string][]record.Event{
				tc.worker: leaderTerm(1, tc.sent, tc.won, nil, tc.won+400e6),
			}, cutOf(tc.region, tc.how, 2*sec, 6*sec)...))
			rep, err := Dir(dir, ttl2s)
			if err != nil {
				t.Fatal(err)
			}
			if got := rep.CutLeaders == 1; got != tc.acrossTheCut {
				t.Errorf("%d leaders across the cut, want %v (problems %v)", rep.CutLeaders, tc.acrossTheCut, rep.Problems)
			}
		})
	}
}

// TestCheckScenariosEndsAFaultsWindowAtTheNextPreparation checks that a
// leadership moved on purpose before a fault (leadFrom) does not count as
// the failover of the fault before it, which had none.
func TestCheckScenariosEndsAFaultsWindowAtTheNextPreparation(t *testing.T) {
	dir := writeRun(t, superclusterRun(map[string][]record.Event{
		"w1": leaderTerm(1, 0, 100e6, []int64{sec, 2 * sec, 3 * sec}, 3500e6),
		"w2": leaderTerm(3, 4*sec, 4100e6, nil, 4500e6),
	},
		record.Event{T: 2 * sec, Kind: "fault", Scenario: "gateway-delay"},
		record.Event{T: 2500e6, Kind: "heal", Scenario: "gateway-delay"},
		record.Event{T: 3 * sec, Kind: "prepare", Scenario: "remote-cut"},
		record.Event{T: 4200e6, Kind: "fault", Scenario: "remote-cut"}))
	rep, err := Dir(dir, ttl2s)
	if err != nil {
		t.Fatal(err)
	}
	for _, sr := range rep.Scenarios {
		if sr.Name == "gateway-delay" && sr.Failovers != 0 {
			t.Errorf("gateway-delay: %d failovers (%v ms), want none: w2's win came after the next scenario's preparation", sr.Failovers, sr.samples)
		}
	}
}
