//go:build unix

package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// supercluster is the harness's record of a -supercluster run with one
// worker in each region, w1 in C1 (the home), w2 in C2 and w3 in C3, and
// the cuts given.
func superclusterRun(workers map[string][]Event, cuts ...Event) map[string][]Event {
	harness := []Event{
		{T: 1, Kind: "topology", Target: "C1"},
		{T: 2, Kind: "spawn", Target: "w1", Region: "C1"},
		{T: 3, Kind: "spawn", Target: "w2", Region: "C2"},
		{T: 4, Kind: "spawn", Target: "w3", Region: "C3"},
	}
	return baseRun(workers, append(harness, cuts...)...)
}

// cutOf returns the harness's record of region cut off from from to to.
func cutOf(region, how string, from, to int64) []Event {
	return []Event{{T: from, Kind: "region-cut", Target: region, Cause: how}, {T: to, Kind: "region-heal", Target: region}}
}

// TestCheckCutsFindsALeaderElsewhereWhileTheHomeRegionIsCut is the
// mutation the rule exists for: while C1, the bucket's home, is cut off,
// w2 in C2 announces a win whose write it sent during the cut, as a
// topology whose gateways let writes around the cut would. The checker
// counts it and fails the run; w1's win in C1 at the same time is
// reachable and passes.
func TestCheckCutsFindsALeaderElsewhereWhileTheHomeRegionIsCut(t *testing.T) {
	cut := cutOf("C1", "blackhole", 2*sec, 6*sec)
	dir := writeRun(t, superclusterRun(map[string][]Event{
		"w1": leaderTerm(1, 3*sec, 3100e6, nil, 3500e6),
		"w2": leaderTerm(3, 4*sec, 4100e6, nil, 4500e6),
	}, cut...))
	rep, err := check(ttl2s, dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.CutLeaders != 1 || rep.ok() {
		t.Fatalf("%d leaders across the cut, ok %v; want 1 (w2's), not ok (problems %v)", rep.CutLeaders, rep.ok(), rep.Problems)
	}
	if !slices.ContainsFunc(rep.Problems, func(p string) bool { return strings.Contains(p, "w2 (region C2) announced token 3") }) {
		t.Errorf("no problem names w2's win: %v", rep.Problems)
	}

	// Without the win across the cut, the same run passes.
	dir = writeRun(t, superclusterRun(map[string][]Event{
		"w1": leaderTerm(1, 3*sec, 3100e6, nil, 3500e6),
	}, cut...))
	if rep, err = check(ttl2s, dir); err != nil {
		t.Fatal(err)
	}
	if rep.CutLeaders != 0 || !rep.ok() {
		t.Errorf("%d leaders across the cut, ok %v; want 0, ok (problems %v)", rep.CutLeaders, rep.ok(), rep.Problems)
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
			dir := writeRun(t, superclusterRun(map[string][]Event{
				tc.worker: leaderTerm(1, tc.sent, tc.won, nil, tc.won+400e6),
			}, cutOf(tc.region, tc.how, 2*sec, 6*sec)...))
			rep, err := check(ttl2s, dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := rep.CutLeaders == 1; got != tc.acrossTheCut {
				t.Errorf("%d leaders across the cut, want %v (problems %v)", rep.CutLeaders, tc.acrossTheCut, rep.Problems)
			}
		})
	}
}

// TestLeastLoadedSpreadsWorkersOverTheRegions checks the placement of new
// workers: the first ones in turn, a replacement where one is missing.
func TestLeastLoadedSpreadsWorkersOverTheRegions(t *testing.T) {
	regions := []string{"C1", "C2", "C3"}
	load := map[string]int{}
	var got []string
	for range 4 {
		r := regions[leastLoaded(regions, load)]
		load[r]++
		got = append(got, r)
	}
	if want := []string{"C1", "C2", "C3", "C1"}; !slices.Equal(got, want) {
		t.Errorf("first workers in %v, want %v", got, want)
	}
	if r := regions[leastLoaded(regions, map[string]int{"C1": 1, "C2": 0, "C3": 1})]; r != "C2" {
		t.Errorf("a replacement for C2's worker goes to %s", r)
	}
}

// TestChosenScenariosOfEachMode checks which scenarios each mode runs: a
// topology's own only in that mode, and in a -short run of one only those
// and shortWorkerFaults.
func TestChosenScenariosOfEachMode(t *testing.T) {
	names := func(args ...string) []string {
		t.Helper()
		cfg, err := parseFlags(args)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range cfg.chosen() {
			out = append(out, s.name)
		}
		return out
	}
	super := []string{"remote-cut", "remote-cut-loud", "home-cut", "home-cut-loud", "gateway-delay", "home-server-restart"}
	leaf := []string{"leaf-cut", "leaf-cut-loud", "leaf-server-kill"}
	if got, want := names("-short", "-supercluster"), append(slices.Clone(shortWorkerFaults), super...); !slices.Equal(got, want) {
		t.Errorf("-short -supercluster runs %v, want %v", got, want)
	}
	if got, want := names("-short", "-leaf"), append(slices.Clone(shortWorkerFaults), leaf...); !slices.Equal(got, want) {
		t.Errorf("-short -leaf runs %v, want %v", got, want)
	}
	if got := names("-short", "-leaf", "-fleet"); !slices.Contains(got, "join-burst") || !slices.Contains(got, "leaf-cut") {
		t.Errorf("-short -leaf -fleet runs %v, without the fleet's bursts or the leaf's cuts", got)
	}
	full := names("-supercluster")
	for _, n := range []string{"combo", "latency", "pause-0.3", "home-cut"} {
		if !slices.Contains(full, n) {
			t.Errorf("-supercluster does not run %s", n)
		}
	}
	for _, args := range [][]string{{"-supercluster"}, {"-leaf"}, {}, {"-cluster"}} {
		got := names(args...)
		for _, n := range []string{"server-restart", "quorum-loss", "jepsen-7567", "leaf-cut", "home-cut"} {
			mode := map[string]string{"server-restart": "single", "quorum-loss": "cluster", "jepsen-7567": "cluster", "leaf-cut": "leaf", "home-cut": "supercluster"}[n]
			cfg, _ := parseFlags(args)
			if slices.Contains(got, n) != (cfg.mode() == mode) {
				t.Errorf("%v: runs %s: %v, but it is a %s scenario", args, n, slices.Contains(got, n), mode)
			}
		}
	}
	if got := names("-short", "-leaf", "-scenarios", "leaf-cut,latency"); !slices.Equal(got, []string{"latency", "leaf-cut"}) {
		t.Errorf("-short -leaf -scenarios leaf-cut,latency runs %v", got)
	}
}

// TestParseFlagsRefusesTopologiesTogether checks the errors for flags that
// do not go together with -supercluster or -leaf, each naming what is
// allowed.
func TestParseFlagsRefusesTopologiesTogether(t *testing.T) {
	for _, args := range [][]string{
		{"-supercluster", "-cluster"},
		{"-leaf", "-cluster"},
		{"-supercluster", "-leaf"},
		{"-leaf", "-agents"},
		{"-supercluster", "-agents"},
	} {
		_, err := parseFlags(args)
		if err == nil || !strings.Contains(err.Error(), "-") || !strings.Contains(err.Error(), "choose one topology") && !strings.Contains(err.Error(), "-agents runs") {
			t.Errorf("%v: error %v, want one naming what is allowed", args, err)
		}
	}
	cfg, err := parseFlags([]string{"-short", "-leaf", "-fleet"})
	if err != nil || !cfg.leaf || !cfg.fleet || !cfg.shortTopology || cfg.ttl != time.Second {
		t.Errorf("-short -leaf -fleet: %+v, %v", cfg, err)
	}
}

// TestCheckScenariosEndsAFaultsWindowAtTheNextPreparation checks that a
// leadership moved on purpose before a fault (leadFrom) does not count as
// the failover of the fault before it, which had none.
func TestCheckScenariosEndsAFaultsWindowAtTheNextPreparation(t *testing.T) {
	dir := writeRun(t, superclusterRun(map[string][]Event{
		"w1": leaderTerm(1, 0, 100e6, []int64{sec, 2 * sec, 3 * sec}, 3500e6),
		"w2": leaderTerm(3, 4*sec, 4100e6, nil, 4500e6),
	},
		Event{T: 2 * sec, Kind: "fault", Scenario: "gateway-delay"},
		Event{T: 2500e6, Kind: "heal", Scenario: "gateway-delay"},
		Event{T: 3 * sec, Kind: "prepare", Scenario: "remote-cut"},
		Event{T: 4200e6, Kind: "fault", Scenario: "remote-cut"}))
	rep, err := check(ttl2s, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, sr := range rep.Scenarios {
		if sr.Name == "gateway-delay" && sr.Failovers != 0 {
			t.Errorf("gateway-delay: %d failovers (%v ms), want none: w2's win came after the next scenario's preparation", sr.Failovers, sr.samples)
		}
	}
}
