//go:build unix

package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/chaos/check"
	"github.com/kvelect/election/cmd/chaos/harness"
	"github.com/kvelect/election/cmd/chaos/scenario"
)

// options are what the harness's flags say: the run, and what to do with
// its report.
type options struct {
	harness.Config
	json bool   // print the JSON summary as the last line
	html string // write the timeline page here ("": none)
	keep bool   // keep the histories even when every invariant holds
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
// acknowledged write, in package worker).
const defaultStopDelay = 500 * time.Millisecond

// agentDaemons is the default number of daemons of an -agents run: two of
// each shape of command (the harness's daemonShapes).
const agentDaemons = 8

// agentsShortBudget is -short's budget of an -agents run: a round of
// every scenario takes about 45 s on two cores, so that the run ends
// within about 90 s on a slower machine, its first scenarios (the agents'
// kills, stops and pauses) run in any case.
const agentsShortBudget = time.Minute

// parseFlags reads the harness's flags and refuses bad combinations.
func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	var cfg options
	names := fs.String("scenarios", "all", "comma-separated scenarios to run, or all: "+strings.Join(scenario.Names(), ", "))
	fs.IntVar(&cfg.Rounds, "rounds", 3, "rounds; each runs every chosen scenario once")
	fs.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "bucket TTL (below 2s uses election.WithUnsafeShortTTL; with -agents at least 2s, the agent's minimum, and -short's 1s becomes 2s)")
	fs.IntVar(&cfg.Workers, "workers", 3, "campaigner processes")
	fs.BoolVar(&cfg.Cluster, "cluster", false, "run a 3-node cluster with an R3 bucket instead of one server")
	fs.BoolVar(&cfg.Supercluster, "supercluster", false, "run three regions (C1, C2, C3) of one server each, joined by gateways through proxies the harness cuts and delays, an R1 bucket placed in C1, and the workers spread over the regions")
	fs.BoolVar(&cfg.Leaf, "leaf", false, "run a hub (JetStream domain hub) and a leaf node server (domain leaf) linked through a proxy the harness cuts, the bucket in the hub's domain, and the workers alternately on the hub and on the leaf")
	fs.DurationVar(&cfg.Budget, "budget", 0, "stop starting scenarios after this long (0: no limit)")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON summary object as the last line")
	fs.StringVar(&cfg.html, "html", "", "write a timeline of the run to this HTML file")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the histories even when every invariant holds")
	fs.BoolVar(&cfg.Markers, "markers", false, "create the bucket with expiry markers (LimitMarkerTTL 1s): the audit log shows expiries")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the combinations' draws (the combo scenario); 0 draws one, printed in the summary")
	lazy := fs.Bool("lazy-fsync", false, "servers fsync lazily, every 2 minutes (nats-server's default), instead of before acknowledging each write (sync_interval: always)")
	fs.BoolVar(&cfg.Priorities, "priorities", false, "give each worker a higher priority than the one before, preferring higher (WithPreferHigher, ready after a TTL): leaders hand over as workers are replaced")
	fs.DurationVar(&cfg.StopDelay, "stop-delay", defaultStopDelay, "how long a worker's work goes on acting after its leadership context is cancelled, never past the library's work deadline (0: it returns at once; not with -fleet or -agents)")
	fs.BoolVar(&cfg.Fleet, "fleet", false, "run fleet nodes (-workers of them) with daemons instead of campaigners for one key")
	fs.IntVar(&cfg.Daemons, "daemons", 12, fmt.Sprintf("with -fleet or -agents: daemons, each able to run on every node (-agents: default %d)", agentDaemons))
	fs.BoolVar(&cfg.Agents, "agents", false, "run a fleet whose nodes are election agent processes (-workers of them) and whose daemons are shell commands that fork; the TTL is at least 2s")
	fs.StringVar(&cfg.Election, "election", "", "with -agents: the election binary to run as the agent (default: built from ./cmd/election for the run)")
	short := fs.Bool("short", false, fmt.Sprintf("CI mode: one round at TTL 1s, within about 2 minutes, 3 with -cluster (with -agents: TTL 2s, no scenario started after %v, within about 90 s; with -supercluster or -leaf: the topology's scenarios and %s, within about 90 s)", agentsShortBudget, strings.Join(scenario.ShortWorkerFaults, ", ")))
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.SyncAlways = !*lazy
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64() | 1
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
		cfg.Rounds, cfg.TTL, cfg.Budget = 1, time.Second, 2*time.Minute
		cfg.ShortTopology = cfg.Supercluster || cfg.Leaf
		switch {
		case cfg.Agents:
			cfg.Budget = agentsShortBudget
		case cfg.Cluster:
			cfg.Budget = 3 * time.Minute // the server pauses and partitions come last
		}
	}
	if err := cfg.checkAgents(given); err != nil {
		return cfg, err
	}
	if cfg.Workers < 2 {
		return cfg, fmt.Errorf("-workers %d: need at least 2", cfg.Workers)
	}
	if cfg.Fleet && (cfg.Daemons < 1 || cfg.Daemons > 100) {
		return cfg, fmt.Errorf("-daemons %d: allowed 1 to 100", cfg.Daemons)
	}
	if cfg.Fleet && given["stop-delay"] {
		return cfg, fmt.Errorf("-stop-delay applies to campaigners for one key, not to -fleet or -agents")
	}
	if cfg.Fleet && cfg.Priorities {
		return cfg, fmt.Errorf("-priorities applies to campaigners for one key, not to -fleet or -agents")
	}
	if cfg.Rounds < 1 {
		return cfg, fmt.Errorf("-rounds %d: need at least 1", cfg.Rounds)
	}
	known := map[string]bool{}
	for _, n := range scenario.Names() {
		known[n] = true
	}
	if *names != "all" {
		for _, n := range strings.Split(*names, ",") {
			if !known[n] {
				return cfg, fmt.Errorf("-scenarios: unknown scenario %q; known: %s", n, strings.Join(scenario.Names(), ", "))
			}
			cfg.Scenarios = append(cfg.Scenarios, n)
		}
	}
	return cfg, nil
}

// checkAgents checks the flags of an -agents run, which is a fleet run,
// and sets its defaults: the daemons unless given, and the TTL raised to
// the agent's minimum.
func (cfg *options) checkAgents(given map[string]bool) error {
	if !cfg.Agents {
		if cfg.Election != "" {
			return fmt.Errorf("-election %s: applies to -agents only", cfg.Election)
		}
		return nil
	}
	if given["ttl"] && cfg.TTL < election.MinTTL {
		return fmt.Errorf("-ttl %v: an election agent needs a bucket TTL of at least %v", cfg.TTL, election.MinTTL)
	}
	cfg.Fleet = true
	if !given["daemons"] {
		cfg.Daemons = agentDaemons
	}
	cfg.TTL = max(cfg.TTL, election.MinTTL) // -short's 1s
	if cfg.Election != "" {
		if _, err := os.Stat(cfg.Election); err != nil {
			return fmt.Errorf("-election: %w", err)
		}
	}
	return nil
}

// checkTopology refuses flags that do not go together with -supercluster
// or -leaf.
func (cfg options) checkTopology() error {
	for _, f := range []struct {
		name string
		on   bool
	}{{"supercluster", cfg.Supercluster}, {"leaf", cfg.Leaf}} {
		if !f.on {
			continue
		}
		switch {
		case cfg.Cluster:
			return fmt.Errorf("-%s and -cluster: choose one topology (-cluster, -supercluster, -leaf, or none for a single server)", f.name)
		case f.name == "supercluster" && cfg.Leaf:
			return errors.New("-supercluster and -leaf: choose one topology (-cluster, -supercluster, -leaf, or none for a single server)")
		case cfg.Agents:
			return fmt.Errorf("-%s and -agents: -%s runs campaigners (the default) or -fleet nodes; -agents runs on a single server or -cluster", f.name, f.name)
		}
	}
	return nil
}

// checkParams is what the checker is told of the run besides its files.
func (cfg options) checkParams() check.Params {
	p := check.Params{TTL: cfg.TTL, Workers: cfg.Workers, Rounds: cfg.Rounds, Cluster: cfg.Cluster, Topology: cfg.Topology(),
		SyncAlways: cfg.SyncAlways, Seed: cfg.Seed, Fleet: cfg.Fleet, Agents: cfg.Agents, Daemons: cfg.Daemons, StopDelay: cfg.StopDelay}
	if cfg.html != "" { // the drawn history goes beside the timeline page
		p.PageDir = filepath.Dir(cfg.html)
	}
	return p
}
