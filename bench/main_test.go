package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
)

// mainEnv, set in the environment of this test binary, makes it run the
// command's main with its arguments instead of the tests.
const mainEnv = "BENCH_TEST_RUN_MAIN"

// TestMain also serves as the candidate process of the -procs tests, which
// start this test binary again, and as the command itself for
// TestMainExitsAsDocumented.
func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	runIfCandidate()
	testenv.VerifyNoLeaks(m)
}

// TestMainExitsAsDocumented runs the command's main, in this test binary
// started again, on bad flags (exit 2 and the reason), on -h (exit 0 and
// the flags) and on an argument (exit 2).
func TestMainExitsAsDocumented(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args   []string
		code   int
		stderr []string
	}{
		{[]string{"-rounds", "0"}, 2, []string{"bench: -rounds 0: need at least 1\n"}},
		{[]string{"-ttl", "1s"}, 2, []string{"bench: -ttl 1s: need whole seconds from 2s"}},
		{[]string{"extra"}, 2, []string{`bench: unexpected argument "extra"`}},
		{[]string{"-h"}, 0, []string{"-rounds", "-ttl", "-candidates", "-seed", "-procs", "-json"}},
	} {
		cmd := exec.Command(self, tt.args...)
		cmd.Env = append(os.Environ(), mainEnv+"=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if err != nil && code <= 0 {
			t.Fatalf("bench %q: %v", tt.args, err)
		}
		if code != tt.code || stdout.Len() != 0 {
			t.Errorf("bench %q: exit %d, stdout %q; want exit %d and nothing on stdout", tt.args, code, stdout.String(), tt.code)
		}
		for _, want := range tt.stderr {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("bench %q: stderr lacks %q:\n%s", tt.args, want, stderr.String())
			}
		}
	}
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

// TestRunMeasuresEveryScenarioOnBothSystems runs two rounds of everything
// against the real servers (the second on the servers the first used) and
// checks that each scenario produced a figure per round on each system,
// that the table shows them, and that the run leaves no goroutine behind
// (TestMain).
func TestRunMeasuresEveryScenarioOnBothSystems(t *testing.T) {
	t.Parallel()
	checkRounds(t, false, 2)
}

// TestRunWithProcsMeasuresEveryScenarioOnBothSystems does the same, one
// round, with every candidate in its own process; closing the groups reaps
// them.
func TestRunWithProcsMeasuresEveryScenarioOnBothSystems(t *testing.T) {
	t.Parallel()
	checkRounds(t, true, 1)
}

// checkRounds runs rounds rounds at a random seed, as the command does by
// default, and checks the -json report and the table made from it.
func checkRounds(t *testing.T, procs bool, rounds int) {
	t.Helper()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	var out bytes.Buffer
	if err := run(config{rounds: rounds, ttl: 2 * time.Second, candidates: 3, seed: seed, procs: procs, json: true}, &out, io.Discard); err != nil {
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
	for i, r := range rep.Results {
		if len(r.SamplesMs) != rounds || len(r.Errors) > 0 {
			t.Errorf("%s on %s: samples %v, errors %v; want %d samples", r.Scenario, r.System, r.SamplesMs, r.Errors, rounds)
		}
		// The JSON leaves out the scenario, which the table needs.
		for _, sc := range scenarios {
			if sc.id == r.Scenario {
				rep.Results[i].sc = sc
			}
		}
	}

	// The table of the same report: a row per scenario and system, each
	// with its number of rounds.
	var table bytes.Buffer
	if err := writeTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("the table:\n%s", table.String())
	for _, r := range rep.Results {
		row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(r.sc.title) + ` +` + regexp.QuoteMeta(r.System) + ` +` + strconv.Itoa(rounds) + ` +[0-9.]+ `)
		if r.sc.title == "" || !row.MatchString(table.String()) {
			t.Errorf("the table has no row of %d rounds for %s on %s", rounds, r.Scenario, r.System)
		}
	}
	if strings.Contains(table.String(), "failed round") {
		t.Error("the table shows a failed round")
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
