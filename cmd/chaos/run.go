//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/kvelect/election/cmd/chaos/check"
	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/cmd/chaos/report"
)

// runChaos runs the harness, checks the histories and prints the report. It
// returns the process exit code.
func runChaos(cfg config) int {
	dir, err := os.MkdirTemp("", "chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	h, err := newHarness(cfg, dir)
	if err == nil {
		err = h.run(context.Background())
	}
	if h != nil {
		h.shutdown()
	}
	if err != nil { // what was recorded until then is checked all the same
		fmt.Fprintf(os.Stderr, "chaos: %v (histories kept in %s)\n", err, dir)
		if h == nil {
			return 2
		}
	}
	harnessErr := err
	rep, err := check.Dir(dir, cfg.checkParams())
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: checking: %v (histories kept in %s)\n", err, dir)
		return 2
	}
	report.Print(os.Stdout, rep, cfg.json)
	if cfg.html != "" {
		if err := report.WriteHTML(cfg.html, rep); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: html:", err)
		}
	}
	switch {
	case harnessErr != nil:
	case !rep.OK() || cfg.keep:
		fmt.Fprintf(os.Stderr, "chaos: histories kept in %s\n", dir)
	default:
		os.RemoveAll(dir)
	}
	switch {
	case !rep.OK():
		return 1
	case harnessErr != nil:
		return 2
	}
	return 0
}

// run starts the servers and workers, then injects the chosen scenarios
// round after round.
func (h *harness) run(ctx context.Context) error {
	if err := h.startServers(ctx); err != nil {
		return err
	}
	if home := h.home(); home != nil {
		h.rec.Record(record.Event{Kind: "topology", Target: home.Server.Region})
	}
	if err := h.setup(ctx); err != nil {
		return fmt.Errorf("creating the bucket: %w", err)
	}
	if h.cfg.agents {
		if err := h.prepareAgents(); err != nil {
			return err
		}
	}
	start := time.Now()
	h.rec.Record(record.Event{Kind: "cold-start"})
	for range h.cfg.workers {
		if err := h.spawnWorker(); err != nil {
			return err
		}
	}
	for round := range h.cfg.rounds {
		for _, sc := range h.cfg.chosen() {
			if h.cfg.budget > 0 && time.Since(start) > h.cfg.budget {
				h.rec.Record(record.Event{Kind: "budget-spent"})
				return h.settle(ctx)
			}
			if err := h.inject(ctx, round, sc); err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, sc.name, err)
			}
		}
	}
	return h.settle(ctx)
}

// inject runs one scenario against the current leader and waits until a
// leader leads again.
func (h *harness) inject(ctx context.Context, round int, sc scenario) error {
	wait, cancel := context.WithTimeout(ctx, leaderTimeout(h.cfg))
	defer cancel()
	leader, err := h.currentLeader(wait)
	if err != nil {
		return err
	}
	if sc.prepare != nil {
		h.rec.Record(record.Event{Kind: "prepare", Scenario: sc.name, Target: leader.name})
		if err := sc.prepare(ctx, h, leader); err != nil {
			return fmt.Errorf("preparing: %w", err)
		}
		h.unsettle()
		if leader, err = h.currentLeader(wait); err != nil {
			return err
		}
	}
	h.drainWins()
	h.unsettle()
	h.rec.Record(record.Event{Kind: "fault", Scenario: sc.name, Target: leader.name, Seq: round + 1})
	if err := sc.inject(ctx, h, leader); err != nil {
		return err
	}
	h.rec.Record(record.Event{Kind: "heal", Scenario: sc.name})
	// A renewal that raced the fault (sent before a purge landed, say) does
	// not count: wait for one sent after the heal.
	h.unsettle()
	return h.settle(ctx)
}

// settle waits until a leader leads and has renewed since the last fault.
func (h *harness) settle(ctx context.Context) error {
	wait, cancel := context.WithTimeout(ctx, leaderTimeout(h.cfg))
	defer cancel()
	_, err := h.currentLeader(wait)
	return err
}

// leaderTimeout is how long the harness waits for a leader before it calls
// the run hung: far beyond any failover the design allows, plus a cluster's
// stream-leader election.
func leaderTimeout(cfg config) time.Duration {
	return 10*cfg.ttl + startTimeout
}
