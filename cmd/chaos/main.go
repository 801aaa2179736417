// Command chaos is a fault-injection harness for the election library. It
// runs campaigners as separate processes against nats-server processes (one,
// or three clustered), injects faults, records every process's history on
// the shared monotonic clock, and checks that no two leaders ever overlapped.
//
//	go run ./cmd/chaos                  # default mix, single server, readable table
//	go run ./cmd/chaos -cluster         # a 3-node cluster with an R3 bucket
//	go run ./cmd/chaos -short           # the CI mode
//	go run ./cmd/chaos -json -html run.html
//
// With -fleet the processes are nodes of a fleet (package fleet) running
// daemons, and the checker asks the same of every daemon: never on two nodes
// at once, stale tokens refused.
//
//	go run ./cmd/chaos -fleet           # 3 nodes, 12 daemons
//
// It exits 1 when an invariant is broken and keeps the histories of that run.
// It re-executes itself as "chaos worker …", "chaos node …" and "chaos server …".
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

type config struct {
	scenarios  []string
	rounds     int
	ttl        time.Duration
	workers    int
	cluster    bool
	budget     time.Duration
	json       bool
	html       string
	keep       bool
	syncAlways bool
	markers    bool
	priorities bool
	fleet      bool
	daemons    int
}

// daemonNames returns the daemons of a fleet run, or the one key of a
// single-key run, "".
func (cfg config) daemonNames() []string {
	if !cfg.fleet {
		return []string{""}
	}
	names := make([]string, cfg.daemons)
	for i := range names {
		names[i] = fmt.Sprintf("d%02d", i)
	}
	return names
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "worker" || os.Args[1] == "node" || os.Args[1] == "server") {
		run := map[string]func([]string) error{"worker": runWorker, "node": runNode, "server": runServer}[os.Args[1]]
		if err := run(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "chaos %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	os.Exit(runChaos(cfg))
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var cfg config
	names := fs.String("scenarios", "all", "comma-separated scenarios to run, or all: "+strings.Join(allScenarioNames(), ", "))
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds; each runs every chosen scenario once")
	fs.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "bucket TTL (below 2s uses election.WithUnsafeShortTTL)")
	fs.IntVar(&cfg.workers, "workers", 3, "campaigner processes")
	fs.BoolVar(&cfg.cluster, "cluster", false, "run a 3-node cluster with an R3 bucket instead of one server")
	fs.DurationVar(&cfg.budget, "budget", 0, "stop starting scenarios after this long (0: no limit)")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON summary object as the last line")
	fs.StringVar(&cfg.html, "html", "", "write a timeline of the run to this HTML file")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the histories even when every invariant holds")
	fs.BoolVar(&cfg.markers, "markers", false, "create the bucket with expiry markers (LimitMarkerTTL 1s): the audit log shows expiries")
	fs.BoolVar(&cfg.syncAlways, "sync-always", false, "servers fsync every write before acknowledging it (as for power loss; no fault here needs it)")
	fs.BoolVar(&cfg.priorities, "priorities", false, "give each worker a higher priority than the one before, preferring higher (WithPreferHigher, ready after a TTL): leaders hand over as workers are replaced")
	fs.BoolVar(&cfg.fleet, "fleet", false, "run fleet nodes (-workers of them) with daemons instead of campaigners for one key")
	fs.IntVar(&cfg.daemons, "daemons", 12, "with -fleet: daemons, each able to run on every node")
	short := fs.Bool("short", false, "CI mode: one round at TTL 1s, within about 2 minutes")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if *short {
		cfg.rounds, cfg.ttl, cfg.budget = 1, time.Second, 2*time.Minute
	}
	if cfg.workers < 2 {
		return cfg, fmt.Errorf("-workers %d: need at least 2", cfg.workers)
	}
	if cfg.fleet && (cfg.daemons < 1 || cfg.daemons > 100) {
		return cfg, fmt.Errorf("-daemons %d: allowed 1 to 100", cfg.daemons)
	}
	if cfg.fleet && cfg.priorities {
		return cfg, fmt.Errorf("-priorities applies to campaigners for one key, not to -fleet")
	}
	if cfg.rounds < 1 {
		return cfg, fmt.Errorf("-rounds %d: need at least 1", cfg.rounds)
	}
	known := map[string]bool{}
	for _, n := range allScenarioNames() {
		known[n] = true
	}
	if *names != "all" {
		for _, n := range strings.Split(*names, ",") {
			if !known[n] {
				return cfg, fmt.Errorf("-scenarios: unknown scenario %q; known: %s", n, strings.Join(allScenarioNames(), ", "))
			}
			cfg.scenarios = append(cfg.scenarios, n)
		}
	}
	return cfg, nil
}

func allScenarioNames() []string {
	var names []string
	for _, s := range scenarios(time.Second) {
		names = append(names, s.name)
	}
	return names
}

// chosen returns the scenarios this run injects: those named, or all that
// apply to its mode.
func (cfg config) chosen() []scenario {
	mode := "single"
	if cfg.cluster {
		mode = "cluster"
	}
	var out []scenario
	for _, s := range scenarios(cfg.ttl) {
		if s.mode != "" && s.mode != mode || s.fleetOnly && !cfg.fleet {
			continue
		}
		if len(cfg.scenarios) == 0 || contains(cfg.scenarios, s.name) {
			out = append(out, s)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
