//go:build unix

package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/chaos/scenario"
)

// TestChosenScenariosOfEachMode checks which scenarios each mode runs: a
// topology's own only in that mode, and in a -short run of one only those
// and scenario.ShortWorkerFaults.
func TestChosenScenariosOfEachMode(t *testing.T) {
	names := func(args ...string) []string {
		t.Helper()
		cfg, err := parseFlags(args)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range scenario.Chosen(cfg.Config) {
			out = append(out, s.Name)
		}
		return out
	}
	super := []string{"remote-cut", "remote-cut-loud", "home-cut", "home-cut-loud", "gateway-delay", "home-server-restart"}
	leaf := []string{"leaf-cut", "leaf-cut-loud", "leaf-server-kill"}
	if got, want := names("-short", "-supercluster"), append(slices.Clone(scenario.ShortWorkerFaults), super...); !slices.Equal(got, want) {
		t.Errorf("-short -supercluster runs %v, want %v", got, want)
	}
	if got, want := names("-short", "-leaf"), append(slices.Clone(scenario.ShortWorkerFaults), leaf...); !slices.Equal(got, want) {
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
			if slices.Contains(got, n) != (cfg.Mode() == mode) {
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
	if err != nil || !cfg.Leaf || !cfg.Fleet || !cfg.ShortTopology || cfg.TTL != time.Second {
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
	if !cfg.Fleet || cfg.TTL != 2*time.Second || cfg.Daemons != agentDaemons || cfg.Budget != agentsShortBudget {
		t.Errorf("-short -agents: fleet %v, TTL %v, daemons %d, budget %v; want a fleet, 2s, %d, %v",
			cfg.Fleet, cfg.TTL, cfg.Daemons, cfg.Budget, agentDaemons, agentsShortBudget)
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
