//go:build unix

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
// With -agents the nodes are election agent processes (the command, built
// for the run or given with -election) whose daemons are shell commands that
// fork: each runs an actor, this binary again, as a grandchild of the agent
// or deeper. The actors record their own runs and acts, and the checker
// asks of them what it asks of a fleet's daemons, plus that the daemons of a
// killed or paused agent die in time and that none outlives its agent. Its
// own faults stop (SIGSTOP) the guard of one of the leader's daemons while
// the daemon's key is deleted (guard-stop) or the agent leaves
// (guard-stop-leave): the agent must kill the daemon itself.
//
//	go run ./cmd/chaos -agents          # 3 agents, 8 daemons, TTL 2s
//	go run ./cmd/chaos -short -agents -election /tmp/election-old
//
// With -supercluster the servers are three regions joined by gateways, the
// bucket in the first, the workers spread over the regions; with -leaf a
// hub and a leaf node with JetStream domains of their own, the bucket in the
// hub's. The harness cuts and delays the links between them (see
// docs/topologies.md).
//
//	go run ./cmd/chaos -short -supercluster
//	go run ./cmd/chaos -short -leaf
//
// It exits 1 when an invariant is broken and keeps the histories of that run.
// It re-executes itself as "chaos worker …", "chaos node …", "chaos actor",
// and for each nats-server of the run as a server of the topology kit
// (internal/topology).
package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/chaos/check"
	"github.com/kvelect/election/internal/sim"
	"github.com/kvelect/election/internal/topology"
)

// config is what the harness's flags say.
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
	seed       uint64
	markers    bool
	priorities bool
	fleet      bool
	daemons    int
	// agents: the fleet's nodes are election agents, run from the binary
	// election (built for the run if empty).
	agents   bool
	election string
	// supercluster: three regions of one server each, joined by gateways;
	// leaf: a hub and a leaf node server (topologies.go).
	supercluster bool
	leaf         bool
	// shortTopology: -short with -supercluster or -leaf, which runs the
	// topology's own scenarios and some of the workers' (shortWorkerFaults).
	shortTopology bool
	// stopDelay: how long a worker's work goes on after its leadership
	// context is cancelled (worker -stop-delay).
	stopDelay time.Duration
}

// defaultStopDelay is how long a worker's work takes to stop after its
// leadership context is cancelled, as a command on SIGTERM or a draining
// daemon does. The work also ends at the library's work deadline
// (election.WorkDeadline), as election run's guard kills its command then,
// so the run is safe by design at any TTL: where the context is cancelled at
// the validity deadline (a leader cut off, paused, too slow) the work has
// the work margin left (58 ms at -short's 1 s TTL, 116 ms at 2 s, 723 ms at
// 10 s), and where the leader is told at once (its key deleted, purged or
// overwritten; a SIGTERM; a handover) the whole 500 ms fits before the
// deadline of a leader that renewed just before, as the harness's leader
// did when a fault hits it (the worker reads the deadline again at each
// acknowledged write, trackWorkDeadline).
const defaultStopDelay = 500 * time.Millisecond

// agentDaemons is the default number of daemons of an -agents run: two of
// each shape of command (daemonShapes).
const agentDaemons = 8

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

// main runs the harness, or one of the roles it re-executes itself as.
func main() {
	topology.ServeIfAsked() // a server of the run (harness.startServers)
	if slices.Contains(os.Args[1:], "-simulate") || slices.Contains(os.Args[1:], "--simulate") {
		sim.Command(os.Args[1:]) // the simulator (internal/sim), in place of real processes
	}
	roles := map[string]func([]string) error{"worker": runWorker, "node": runNode, "actor": runActor}
	if run, ok := roles[firstArg(os.Args)]; ok {
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

// firstArg returns args[1], or "" if there is none.
func firstArg(args []string) string {
	if len(args) < 2 {
		return ""
	}
	return args[1]
}

// parseFlags reads the harness's flags and refuses bad combinations.
func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var cfg config
	names := fs.String("scenarios", "all", "comma-separated scenarios to run, or all: "+strings.Join(allScenarioNames(), ", "))
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds; each runs every chosen scenario once")
	fs.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "bucket TTL (below 2s uses election.WithUnsafeShortTTL; with -agents at least 2s, the agent's minimum, and -short's 1s becomes 2s)")
	fs.IntVar(&cfg.workers, "workers", 3, "campaigner processes")
	fs.BoolVar(&cfg.cluster, "cluster", false, "run a 3-node cluster with an R3 bucket instead of one server")
	fs.BoolVar(&cfg.supercluster, "supercluster", false, "run three regions (C1, C2, C3) of one server each, joined by gateways through proxies the harness cuts and delays, an R1 bucket placed in C1, and the workers spread over the regions")
	fs.BoolVar(&cfg.leaf, "leaf", false, "run a hub (JetStream domain hub) and a leaf node server (domain leaf) linked through a proxy the harness cuts, the bucket in the hub's domain, and the workers alternately on the hub and on the leaf")
	fs.DurationVar(&cfg.budget, "budget", 0, "stop starting scenarios after this long (0: no limit)")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON summary object as the last line")
	fs.StringVar(&cfg.html, "html", "", "write a timeline of the run to this HTML file")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the histories even when every invariant holds")
	fs.BoolVar(&cfg.markers, "markers", false, "create the bucket with expiry markers (LimitMarkerTTL 1s): the audit log shows expiries")
	fs.Uint64Var(&cfg.seed, "seed", 0, "seed of the combinations' draws (the combo scenario); 0 draws one, printed in the summary")
	lazy := fs.Bool("lazy-fsync", false, "servers fsync lazily, every 2 minutes (nats-server's default), instead of before acknowledging each write (sync_interval: always)")
	fs.BoolVar(&cfg.priorities, "priorities", false, "give each worker a higher priority than the one before, preferring higher (WithPreferHigher, ready after a TTL): leaders hand over as workers are replaced")
	fs.DurationVar(&cfg.stopDelay, "stop-delay", defaultStopDelay, "how long a worker's work goes on acting after its leadership context is cancelled, never past the library's work deadline (0: it returns at once; not with -fleet or -agents)")
	fs.BoolVar(&cfg.fleet, "fleet", false, "run fleet nodes (-workers of them) with daemons instead of campaigners for one key")
	fs.IntVar(&cfg.daemons, "daemons", 12, fmt.Sprintf("with -fleet or -agents: daemons, each able to run on every node (-agents: default %d)", agentDaemons))
	fs.BoolVar(&cfg.agents, "agents", false, "run a fleet whose nodes are election agent processes (-workers of them) and whose daemons are shell commands that fork; the TTL is at least 2s")
	fs.StringVar(&cfg.election, "election", "", "with -agents: the election binary to run as the agent (default: built from ./cmd/election for the run)")
	short := fs.Bool("short", false, fmt.Sprintf("CI mode: one round at TTL 1s, within about 2 minutes, 3 with -cluster (with -agents: TTL 2s, no scenario started after %v, within about 90 s; with -supercluster or -leaf: the topology's scenarios and %s, within about 90 s)", agentsShortBudget, strings.Join(shortWorkerFaults, ", ")))
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.syncAlways = !*lazy
	if cfg.seed == 0 {
		cfg.seed = rand.Uint64() | 1
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := cfg.checkTopology(); err != nil {
		return cfg, err
	}
	if *short {
		cfg.rounds, cfg.ttl, cfg.budget = 1, time.Second, 2*time.Minute
		cfg.shortTopology = cfg.supercluster || cfg.leaf
		switch {
		case cfg.agents:
			cfg.budget = agentsShortBudget
		case cfg.cluster:
			cfg.budget = 3 * time.Minute // the server pauses and partitions come last
		}
	}
	if err := cfg.checkAgents(given); err != nil {
		return cfg, err
	}
	if cfg.workers < 2 {
		return cfg, fmt.Errorf("-workers %d: need at least 2", cfg.workers)
	}
	if cfg.fleet && (cfg.daemons < 1 || cfg.daemons > 100) {
		return cfg, fmt.Errorf("-daemons %d: allowed 1 to 100", cfg.daemons)
	}
	if cfg.fleet && given["stop-delay"] {
		return cfg, fmt.Errorf("-stop-delay applies to campaigners for one key, not to -fleet or -agents")
	}
	if cfg.fleet && cfg.priorities {
		return cfg, fmt.Errorf("-priorities applies to campaigners for one key, not to -fleet or -agents")
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

// checkAgents checks the flags of an -agents run, which is a fleet run,
// and sets its defaults: the daemons unless given, and the TTL raised to
// the agent's minimum.
func (cfg *config) checkAgents(given map[string]bool) error {
	if !cfg.agents {
		if cfg.election != "" {
			return fmt.Errorf("-election %s: applies to -agents only", cfg.election)
		}
		return nil
	}
	if given["ttl"] && cfg.ttl < election.MinTTL {
		return fmt.Errorf("-ttl %v: an election agent needs a bucket TTL of at least %v", cfg.ttl, election.MinTTL)
	}
	cfg.fleet = true
	if !given["daemons"] {
		cfg.daemons = agentDaemons
	}
	cfg.ttl = max(cfg.ttl, election.MinTTL) // -short's 1s
	if cfg.election != "" {
		if _, err := os.Stat(cfg.election); err != nil {
			return fmt.Errorf("-election: %w", err)
		}
	}
	return nil
}

// allScenarioNames lists every scenario the harness knows.
func allScenarioNames() []string {
	var names []string
	for _, s := range scenarios(time.Second) {
		names = append(names, s.name)
	}
	return names
}

// checkTopology refuses flags that do not go together with -supercluster
// or -leaf.
func (cfg config) checkTopology() error {
	for _, f := range []struct {
		name string
		on   bool
	}{{"supercluster", cfg.supercluster}, {"leaf", cfg.leaf}} {
		if !f.on {
			continue
		}
		switch {
		case cfg.cluster:
			return fmt.Errorf("-%s and -cluster: choose one topology (-cluster, -supercluster, -leaf, or none for a single server)", f.name)
		case f.name == "supercluster" && cfg.leaf:
			return errors.New("-supercluster and -leaf: choose one topology (-cluster, -supercluster, -leaf, or none for a single server)")
		case cfg.agents:
			return fmt.Errorf("-%s and -agents: -%s runs campaigners (the default) or -fleet nodes; -agents runs on a single server or -cluster", f.name, f.name)
		}
	}
	return nil
}

// mode names the run's topology: single, cluster, supercluster or leaf.
func (cfg config) mode() string {
	switch {
	case cfg.cluster:
		return "cluster"
	case cfg.supercluster:
		return "supercluster"
	case cfg.leaf:
		return "leaf"
	}
	return "single"
}

// checkParams is what the checker is told of the run besides its files.
func (cfg config) checkParams() check.Params {
	p := check.Params{TTL: cfg.ttl, Workers: cfg.workers, Rounds: cfg.rounds, Cluster: cfg.cluster, Topology: cfg.topology(),
		SyncAlways: cfg.syncAlways, Seed: cfg.seed, Fleet: cfg.fleet, Agents: cfg.agents, Daemons: cfg.daemons, StopDelay: cfg.stopDelay}
	if cfg.html != "" { // the drawn history goes beside the timeline page
		p.PageDir = filepath.Dir(cfg.html)
	}
	return p
}

// topology returns "supercluster" or "leaf" for those modes, else "".
func (cfg config) topology() string {
	if m := cfg.mode(); m == "supercluster" || m == "leaf" {
		return m
	}
	return ""
}

// shortWorkerFaults are the faults of the workers that a -short run of
// -supercluster or -leaf injects besides the topology's own: a leader
// killed and stopped, a candidate killed, the leader paused past its
// validity, resumed stale, cut off from its server silently, one way and
// loudly, and its key deleted (also while it is cut off), purged and
// overwritten. The shorter pauses, the latency and the combinations are
// left to full runs.
var shortWorkerFaults = []string{"leader-kill", "leader-stop", "candidate-kill", "pause-1.5", "pause-3", "stale-resume",
	"blackhole", "half-open", "reset", "key-delete", "cut-off-delete", "key-purge", "key-overwrite"}

// chosen returns the scenarios this run injects: those named, or all that
// apply to its mode (in a -short run of -supercluster or -leaf, the
// topology's own, the fleet's and shortWorkerFaults).
func (cfg config) chosen() []scenario {
	mode := cfg.mode()
	var out []scenario
	for _, s := range scenarios(cfg.ttl) {
		if s.mode != "" && s.mode != mode || s.fleetOnly && !cfg.fleet || s.agentsOnly && !cfg.agents {
			continue
		}
		if len(cfg.scenarios) == 0 && cfg.shortTopology && s.mode == "" && !s.fleetOnly && !contains(shortWorkerFaults, s.name) {
			continue
		}
		if len(cfg.scenarios) == 0 || contains(cfg.scenarios, s.name) {
			out = append(out, s)
		}
	}
	return out
}

// contains reports whether list holds s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
