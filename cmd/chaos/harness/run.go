//go:build unix

package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/cmd/chaos/worker"
)

// Scenario is one fault, injected against the current leader (or around
// it), healed before it returns. In a fleet run, the leader is the node
// running the most daemons, and the key one of its daemons' keys.
type Scenario struct {
	Name string
	// Mode is where it applies: "" for every mode, else one of
	// Config.Mode's names (single, cluster, supercluster, leaf).
	Mode string
	// FleetOnly: membership changes of a fleet run.
	FleetOnly bool
	// AgentsOnly: faults of an -agents run's processes.
	AgentsOnly bool
	// Prepare, if set, runs before the fault (and before it is recorded),
	// against the leader; the fault aims at the leader settled after it.
	Prepare func(ctx context.Context, h *Harness, leader *Worker) error
	Inject  func(ctx context.Context, h *Harness, leader *Worker) error
}

// Run starts the servers and workers, then injects scenarios round after
// round (Config.Rounds), none started once the budget is spent.
func (h *Harness) Run(ctx context.Context, scenarios []Scenario) error {
	if err := h.startServers(ctx); err != nil {
		return err
	}
	if home := h.Home(); home != nil {
		h.rec.Record(record.Event{Kind: "topology", Target: home.Server.Region})
	}
	if err := h.setup(ctx); err != nil {
		return fmt.Errorf("creating the bucket: %w", err)
	}
	if h.cfg.Agents {
		if err := h.prepareAgents(); err != nil {
			return err
		}
	}
	start := time.Now()
	h.rec.Record(record.Event{Kind: "cold-start"})
	for range h.cfg.Workers {
		if err := h.SpawnWorker(); err != nil {
			return err
		}
	}
	for round := range h.cfg.Rounds {
		for _, sc := range scenarios {
			if h.cfg.Budget > 0 && time.Since(start) > h.cfg.Budget {
				h.rec.Record(record.Event{Kind: "budget-spent"})
				return h.settle(ctx)
			}
			if err := h.inject(ctx, round, sc); err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, sc.Name, err)
			}
		}
	}
	return h.settle(ctx)
}

// inject runs one scenario against the current leader and waits until a
// leader leads again.
func (h *Harness) inject(ctx context.Context, round int, sc Scenario) error {
	wait, cancel := context.WithTimeout(ctx, leaderTimeout(h.cfg))
	defer cancel()
	leader, err := h.currentLeader(wait)
	if err != nil {
		return err
	}
	if sc.Prepare != nil {
		h.rec.Record(record.Event{Kind: "prepare", Scenario: sc.Name, Target: leader.name})
		if err := sc.Prepare(ctx, h, leader); err != nil {
			return fmt.Errorf("preparing: %w", err)
		}
		h.unsettle()
		if leader, err = h.currentLeader(wait); err != nil {
			return err
		}
	}
	h.drainWins()
	h.unsettle()
	h.rec.Record(record.Event{Kind: "fault", Scenario: sc.Name, Target: leader.name, Seq: round + 1})
	if err := sc.Inject(ctx, h, leader); err != nil {
		return err
	}
	h.rec.Record(record.Event{Kind: "heal", Scenario: sc.Name})
	// A renewal that raced the fault (sent before a purge landed, say) does
	// not count: wait for one sent after the heal.
	h.unsettle()
	return h.settle(ctx)
}

// settle waits until a leader leads and has renewed since the last fault.
func (h *Harness) settle(ctx context.Context) error {
	wait, cancel := context.WithTimeout(ctx, leaderTimeout(h.cfg))
	defer cancel()
	_, err := h.currentLeader(wait)
	return err
}

// leaderTimeout is how long the harness waits for a leader before it calls
// the run hung: far beyond any failover the design allows, plus a cluster's
// stream-leader election.
func leaderTimeout(cfg Config) time.Duration {
	return 10*cfg.TTL + worker.StartTimeout
}
