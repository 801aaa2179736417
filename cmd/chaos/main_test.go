//go:build unix

package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

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

// TestParseFlagsOfAnAgentsRun checks the defaults and the refusals of
// -agents.
func TestParseFlagsOfAnAgentsRun(t *testing.T) {
	cfg, err := parseFlags([]string{"-short", "-agents"})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.fleet || cfg.ttl != 2*time.Second || cfg.daemons != agentDaemons || cfg.budget != agentsShortBudget {
		t.Errorf("-short -agents: fleet %v, TTL %v, daemons %d, budget %v; want a fleet, 2s, %d, %v",
			cfg.fleet, cfg.ttl, cfg.daemons, cfg.budget, agentDaemons, agentsShortBudget)
	}
	for _, args := range [][]string{
		{"-agents", "-priorities"},
		{"-agents", "-ttl", "1s"},
		{"-election", "/bin/true"},
		{"-agents", "-election", "/nonexistent/election"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
