package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
)

// TestMain also serves as the candidate process of the -procs tests, which
// start this test binary again.
func TestMain(m *testing.M) {
	runIfCandidate()
	testenv.VerifyNoLeaks(m)
}

func TestParseConfigRejectsBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-rounds", "0"}, "-rounds 0: need at least 1"},
		{[]string{"-candidates", "1"}, "-candidates 1: need at least 2"},
		{[]string{"-ttl", "1s"}, "-ttl 1s: need whole seconds from 2s"},
		{[]string{"-ttl", "2500ms"}, "-ttl 2.5s: need whole seconds from 2s"},
		{[]string{"-ttl", "2h"}, "-ttl 2h0m0s: need whole seconds from 2s (the smallest TTL of both systems) to 1m0s"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-ttl", "soon"}, `invalid value "soon" for flag -ttl`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parseConfig(tt.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parseConfig(%q) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.rounds != 8 || cfg.ttl != 2*time.Second || cfg.candidates != 3 || cfg.json || cfg.seed == 0 {
		t.Fatalf("defaults = %+v, want 8 rounds, TTL 2s, 3 candidates, a picked seed, a table", cfg)
	}
}

// TestRunMeasuresEveryScenarioOnBothSystems runs one round of everything
// against the real servers and checks that each scenario produced a figure
// on each system, and that the run leaves no goroutine behind (TestMain).
func TestRunMeasuresEveryScenarioOnBothSystems(t *testing.T) {
	checkOneRound(t, false)
}

// TestRunWithProcsMeasuresEveryScenarioOnBothSystems does the same with
// every candidate in its own process; closing the groups reaps them.
func TestRunWithProcsMeasuresEveryScenarioOnBothSystems(t *testing.T) {
	checkOneRound(t, true)
}

func checkOneRound(t *testing.T, procs bool) {
	t.Helper()
	var out bytes.Buffer
	if err := run(config{rounds: 1, ttl: 2 * time.Second, candidates: 3, seed: 1, procs: procs, json: true}, &out, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("the -json output does not parse: %v\n%s", err, out.String())
	}
	if rep.Procs != procs {
		t.Errorf("report says procs %v, want %v", rep.Procs, procs)
	}
	if got, want := len(rep.Results), 2*len(scenarios); got != want {
		t.Fatalf("%d results, want %d (every scenario on both systems)", got, want)
	}
	for _, r := range rep.Results {
		if len(r.SamplesMs) != 1 || len(r.Errors) > 0 {
			t.Errorf("%s on %s: samples %v, errors %v; want one sample", r.Scenario, r.System, r.SamplesMs, r.Errors)
		}
	}
}

// TestCandidateProcessReportsConnectErrors checks the part of the child
// protocol that no scenario uses: a child that cannot connect.
func TestCandidateProcessReportsConnectErrors(t *testing.T) {
	kv, err := startKvelect(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sys := procSystem{system: kv, self: self, ttl: 2 * time.Second}

	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.newCandidate(fmt.Sprintf("127.0.0.1:%d", ports[0]), "nowhere", 0, nil); err == nil || !strings.Contains(err.Error(), "candidate process 0: nats:") {
		t.Errorf("a candidate with no server to connect to: error %v, want the child's connect error", err)
	}

}
