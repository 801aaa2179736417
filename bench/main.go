// Command bench runs the same leader-election scenarios against this library
// (on an embedded nats-server) and against etcd's concurrency.Election (on an
// embedded etcd), and prints one table of both:
//
//	go run . [-rounds N] [-ttl 2s] [-candidates 3] [-seed S] [-procs] [-json]
//
// See README.md for what each scenario measures and how to read the table.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	etcdversion "go.etcd.io/etcd/api/v3/version"
)

// config is what the command line asks for.
type config struct {
	rounds     int
	ttl        time.Duration
	candidates int
	seed       uint64
	procs      bool
	json       bool
}

// maxTTL keeps a run from waiting for hours: each round waits out a TTL a
// few times.
const maxTTL = time.Minute

func main() {
	runIfCandidate()
	cfg, err := parseConfig(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if err := run(cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// parseConfig reads and checks the flags.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.IntVar(&cfg.rounds, "rounds", 8, "rounds of each scenario on each system")
	fs.DurationVar(&cfg.ttl, "ttl", 2*time.Second, "bucket TTL (kvelect) and session TTL (etcd): whole seconds, 2s to "+maxTTL.String())
	fs.IntVar(&cfg.candidates, "candidates", 3, "candidates per election, each with its own connection")
	fs.Uint64Var(&cfg.seed, "seed", 0, "seed of the random renewal phases (0: pick one)")
	fs.BoolVar(&cfg.procs, "procs", false, "run each candidate in its own child process, not as goroutines of this one")
	fs.BoolVar(&cfg.json, "json", false, "print machine-readable results instead of the table")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case fs.NArg() > 0:
		return config{}, fmt.Errorf("unexpected argument %q: bench takes only flags", fs.Arg(0))
	case cfg.rounds < 1:
		return config{}, fmt.Errorf("-rounds %d: need at least 1", cfg.rounds)
	case cfg.candidates < 2:
		return config{}, fmt.Errorf("-candidates %d: need at least 2, so that a leader has a successor", cfg.candidates)
	case cfg.ttl < 2*time.Second || cfg.ttl > maxTTL || cfg.ttl%time.Second != 0:
		return config{}, fmt.Errorf("-ttl %v: need whole seconds from 2s (the smallest TTL of both systems) to %v (etcd leases count whole seconds)", cfg.ttl, maxTTL)
	}
	if cfg.seed == 0 {
		cfg.seed = rand.Uint64()
	}
	return cfg, nil
}

// run starts both systems, runs every round and prints the results. It
// returns an error if a system could not start or any round failed.
func run(cfg config, stdout, progress io.Writer) error {
	kv, err := startKvelect(cfg.ttl)
	if err != nil {
		return err
	}
	defer kv.close()
	etcd, err := startEtcd(cfg.ttl)
	if err != nil {
		return err
	}
	defer etcd.close()
	systems := []system{kv, etcd}
	if cfg.procs {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		for i, sys := range systems {
			systems[i] = procSystem{system: sys, self: self, ttl: cfg.ttl}
		}
	}

	b := &bench{ttl: cfg.ttl, candidates: cfg.candidates, rand: rand.New(rand.NewPCG(cfg.seed, 0))}
	samples := make([][][]time.Duration, len(scenarios))
	failures := make([][][]string, len(scenarios))
	for i := range scenarios {
		samples[i] = make([][]time.Duration, len(systems))
		failures[i] = make([][]string, len(systems))
	}
	failed := 0
	for round := range cfg.rounds {
		began := time.Now()
		for i, sc := range scenarios {
			for j, sys := range systems {
				d, err := b.runRound(sc, sys, round)
				if err != nil {
					failures[i][j] = append(failures[i][j], fmt.Sprintf("round %d: %v", round, err))
					failed++
					continue
				}
				samples[i][j] = append(samples[i][j], d)
			}
		}
		fmt.Fprintf(progress, "round %d of %d done in %v\n", round+1, cfg.rounds, time.Since(began).Round(time.Millisecond))
	}

	rep := report{
		Rounds:      cfg.rounds,
		TTLMs:       ms(cfg.ttl),
		Candidates:  cfg.candidates,
		Seed:        cfg.seed,
		Procs:       cfg.procs,
		CPUs:        runtime.NumCPU(),
		GoVersion:   runtime.Version(),
		NATSVersion: natsserver.VERSION,
		EtcdVersion: etcdversion.Version,
	}
	for i, sc := range scenarios {
		for j, sys := range systems {
			r := result{Scenario: sc.id, System: sys.name(), Errors: failures[i][j], sc: sc}
			summarize(&r, samples[i][j], cfg.ttl)
			rep.Results = append(rep.Results, r)
		}
	}
	if cfg.json {
		err = writeJSON(stdout, rep)
	} else {
		err = writeTable(stdout, rep)
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d rounds failed", failed)
	}
	return nil
}
