//go:build unix

// Package scenario is the chaos harness's catalogue of faults, in the
// order of a round: each a harness.Scenario that a harness.Harness injects
// against the current leader (or around it), and which of them a run
// chooses for its mode.
package scenario

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/kvelect/election/cmd/chaos/harness"
	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/topology"
)

// All lists every fault the harness knows, in the order of a round, for a
// run at ttl.
func All(ttl time.Duration) []harness.Scenario {
	times := func(k float64) time.Duration { return time.Duration(k * float64(ttl)) }
	return append([]harness.Scenario{
		{Name: "join-burst", FleetOnly: true, Inject: func(_ context.Context, h *harness.Harness, _ *harness.Worker) error {
			for range harness.Burst {
				if err := h.SpawnWorker(); err != nil {
					return err
				}
			}
			return nil
		}},
		{Name: "leave-burst", FleetOnly: true, Inject: func(_ context.Context, h *harness.Harness, l *harness.Worker) error {
			return h.LeaveBurst(l)
		}},
		{Name: "leader-kill", Inject: func(_ context.Context, h *harness.Harness, l *harness.Worker) error { return h.Kill(l) }},
		{Name: "leader-stop", Inject: func(_ context.Context, h *harness.Harness, l *harness.Worker) error { return h.Stop(l) }},
		// The guard between the leader's agent and one of its daemons
		// stopped (SIGSTOP), then the daemon's key deleted, or the agent
		// leaving: the agent must kill the daemon itself.
		{Name: "guard-stop", AgentsOnly: true, Inject: func(ctx context.Context, h *harness.Harness, l *harness.Worker) error {
			return h.StopGuard(l, 2*ttl, func(daemon string) error { return h.KV().Delete(ctx, fleet.DaemonKey(daemon)) })
		}},
		{Name: "guard-stop-leave", AgentsOnly: true, Inject: func(_ context.Context, h *harness.Harness, l *harness.Worker) error {
			return h.StopGuard(l, 0, func(string) error { return h.Stop(l) })
		}},
		{Name: "candidate-kill", Inject: func(_ context.Context, h *harness.Harness, l *harness.Worker) error {
			c := h.Candidate(l)
			if c == nil {
				return errors.New("no candidate to kill")
			}
			return h.Kill(c)
		}},
		{Name: "pause-0.3", Inject: pause(times(0.3))},
		{Name: "pause-1", Inject: pause(times(1))},
		{Name: "pause-1.5", Inject: pause(times(1.5))},
		{Name: "pause-3", Inject: pause(times(3))},
		{Name: "stale-resume", Inject: func(ctx context.Context, h *harness.Harness, l *harness.Worker) error {
			return h.StaleResume(ctx, l, ttl)
		}},
		{Name: "blackhole", Inject: network(ttl, 4*ttl, (*faultproxy.Proxy).Blackhole)},
		{Name: "half-open", Inject: network(ttl, 4*ttl, (*faultproxy.Proxy).HalfOpen)},
		{Name: "latency", Inject: network(ttl, 4*ttl, func(p *faultproxy.Proxy) { p.Delay(times(1.5)) })},
		{Name: "reset", Inject: func(_ context.Context, h *harness.Harness, l *harness.Worker) error {
			for _, p := range l.Proxies() {
				p.Reset()
			}
			return nil
		}},
		{Name: "key-delete", Inject: func(ctx context.Context, h *harness.Harness, l *harness.Worker) error {
			return h.KV().Delete(ctx, h.FaultKey(l))
		}},
		{Name: "cut-off-delete", Inject: func(ctx context.Context, h *harness.Harness, l *harness.Worker) error {
			// The leader cannot see its key deleted: only the announce delay
			// keeps the next winner from overlapping it.
			key := h.FaultKey(l)
			return h.CutOff(ctx, l, ttl, 4*ttl, (*faultproxy.Proxy).Blackhole, func() error {
				return h.KV().Delete(ctx, key)
			})
		}},
		{Name: "key-purge", Inject: func(ctx context.Context, h *harness.Harness, l *harness.Worker) error {
			return h.KV().Purge(ctx, h.FaultKey(l))
		}},
		{Name: "key-overwrite", Inject: func(ctx context.Context, h *harness.Harness, l *harness.Worker) error {
			_, err := h.KV().Put(ctx, h.FaultKey(l), []byte("rogue"))
			return err
		}},
		{Name: "server-restart", Mode: "single", Inject: func(_ context.Context, h *harness.Harness, _ *harness.Worker) error {
			sp := h.Servers()[0]
			h.KillServer(sp)
			return h.StartServer(sp)
		}},
		{Name: "stream-leader-restart", Mode: "cluster", Inject: func(ctx context.Context, h *harness.Harness, _ *harness.Worker) error {
			sp, err := h.StreamLeader(ctx)
			if err != nil {
				return err
			}
			h.KillServer(sp)
			return h.StartServer(sp)
		}},
		{Name: "minority-down", Mode: "cluster", Inject: func(ctx context.Context, h *harness.Harness, _ *harness.Worker) error {
			sp, err := h.StreamFollower(ctx)
			if err != nil {
				return err
			}
			return h.Outage(2*ttl, sp)
		}},
		{Name: "quorum-loss", Mode: "cluster", Inject: func(ctx context.Context, h *harness.Harness, _ *harness.Worker) error {
			return h.Outage(3*ttl, h.Servers()[0], h.Servers()[1])
		}},
		{Name: "combo", Inject: func(ctx context.Context, h *harness.Harness, l *harness.Worker) error {
			return h.Combo(ctx, l, ttl)
		}},
		// Servers paused (SIGSTOP), alive to the kernel, their connections
		// open: a stream leader that stops answering, and one that comes
		// back after its peers moved on.
		{Name: "stream-leader-pause-0.5", Mode: "cluster", Inject: serverPause(times(0.5), (*harness.Harness).StreamLeader)},
		{Name: "stream-leader-pause-3", Mode: "cluster", Inject: serverPause(times(3), (*harness.Harness).StreamLeader)},
		{Name: "follower-pause-3", Mode: "cluster", Inject: serverPause(times(3), (*harness.Harness).StreamFollower)},
		{Name: "leaders-server-pause-3", Mode: "cluster", Inject: func(_ context.Context, h *harness.Harness, l *harness.Worker) error {
			sp, err := h.ServerOf(l)
			if err != nil { // an agent does not say: nothing to aim at
				h.Record(record.Event{Kind: "skipped", Target: l.Name(), Cause: err.Error()})
				return nil
			}
			h.PauseServers(times(3), sp)
			return nil
		}},
		// Route partitions: a server cut off from its peers (every route
		// to and from it silent) while it runs and its clients stay
		// connected; and one whose routes carry traffic one way only.
		{Name: "stream-leader-cut-4", Mode: "cluster", Inject: routeCut(times(4), (*harness.Harness).StreamLeader, (*faultproxy.Proxy).Blackhole)},
		{Name: "follower-cut-4", Mode: "cluster", Inject: routeCut(times(4), (*harness.Harness).StreamFollower, (*faultproxy.Proxy).Blackhole)},
		{Name: "stream-leader-one-way-4", Mode: "cluster", Inject: routeCut(times(4), (*harness.Harness).StreamLeader, (*faultproxy.Proxy).HalfOpen)},
		// Jepsen's sequence behind nats-server issue 7567: two servers
		// paused, the third killed and restarted meanwhile, the two resumed,
		// then two others paused.
		{Name: "jepsen-7567", Mode: "cluster", Inject: func(ctx context.Context, h *harness.Harness, _ *harness.Worker) error {
			a, b, c := h.Servers()[0], h.Servers()[1], h.Servers()[2]
			h.StopServers(a, b)
			h.KillServer(c)
			if err := h.StartServer(c); err != nil {
				h.ContinueServers(a, b)
				return err
			}
			h.ContinueServers(a, b)
			h.PauseServers(times(1), c, a)
			return nil
		}},
	}, topologyScenarios(ttl)...)
}

// serverPause pauses the server pick returns for d.
func serverPause(d time.Duration, pick func(*harness.Harness, context.Context) (*topology.Process, error)) func(context.Context, *harness.Harness, *harness.Worker) error {
	return func(ctx context.Context, h *harness.Harness, _ *harness.Worker) error {
		sp, err := pick(h, ctx)
		if err != nil {
			return err
		}
		h.PauseServers(d, sp)
		return nil
	}
}

// routeCut applies fault to every route to and from the server pick
// returns, for d, then heals them.
func routeCut(d time.Duration, pick func(*harness.Harness, context.Context) (*topology.Process, error), fault func(*faultproxy.Proxy)) func(context.Context, *harness.Harness, *harness.Worker) error {
	return func(ctx context.Context, h *harness.Harness, _ *harness.Worker) error {
		sp, err := pick(h, ctx)
		if err != nil {
			return err
		}
		h.Record(record.Event{Kind: "route-cut", Target: sp.Server.Name})
		h.Topology().IsolateServer(sp.Server.Name, fault)
		time.Sleep(d)
		h.Topology().Heal()
		h.Record(record.Event{Kind: "route-heal", Target: sp.Server.Name})
		return nil
	}
}

// pause stops the leader for d.
func pause(d time.Duration) func(context.Context, *harness.Harness, *harness.Worker) error {
	return func(_ context.Context, h *harness.Harness, l *harness.Worker) error {
		h.Pause(l, d)
		return nil
	}
}

// network applies a fault to the leader's connections (see harness.Harness.CutOff).
func network(least, most time.Duration, fault func(*faultproxy.Proxy)) func(context.Context, *harness.Harness, *harness.Worker) error {
	return func(ctx context.Context, h *harness.Harness, l *harness.Worker) error {
		return h.CutOff(ctx, l, least, most, fault, func() error { return nil })
	}
}

// gatewayDelay is the one-way delay the gateway-delay scenario puts on
// every gateway link, about that between two regions of one continent, and
// gatewayDelayFor how long it lasts. The proxies hold each chunk for the
// delay in turn (faultproxy.Delay), so a burst waits longer.
const (
	gatewayDelay    = 25 * time.Millisecond
	gatewayDelayFor = 5 * time.Second
)

// topologyScenarios are the faults of the links and servers of
// -supercluster and -leaf. A cut aims at a leader in the region it cuts off
// (remote-cut, leaf-cut) or on the far side of it (home-cut): it first
// moves the leadership there (harness.Harness.LeadFrom), unless the run is a fleet's, whose
// daemons run in every region anyway.
func topologyScenarios(ttl time.Duration) []harness.Scenario {
	least, most := 2*ttl, 4*ttl
	region := func(i int) func(*harness.Harness) *topology.Process {
		return func(h *harness.Harness) *topology.Process { return h.Servers()[i] }
	}
	cut := func(name, mode string, leader, cut func(*harness.Harness) *topology.Process, how string, fault func(*faultproxy.Proxy)) harness.Scenario {
		return harness.Scenario{Name: name, Mode: mode,
			Prepare: func(ctx context.Context, h *harness.Harness, l *harness.Worker) error {
				return h.LeadFrom(ctx, l, leader(h), ttl)
			},
			Inject: func(ctx context.Context, h *harness.Harness, _ *harness.Worker) error {
				return h.Isolate(ctx, cut(h), how, fault, least, most)
			}}
	}
	return []harness.Scenario{
		cut("remote-cut", "supercluster", region(1), region(1), "blackhole", (*faultproxy.Proxy).Blackhole),
		cut("remote-cut-loud", "supercluster", region(2), region(2), "loud", (*faultproxy.Proxy).Refuse),
		cut("home-cut", "supercluster", region(1), region(0), "blackhole", (*faultproxy.Proxy).Blackhole),
		cut("home-cut-loud", "supercluster", region(2), region(0), "loud", (*faultproxy.Proxy).Refuse),
		{Name: "gateway-delay", Mode: "supercluster", Inject: func(_ context.Context, h *harness.Harness, _ *harness.Worker) error {
			h.Record(record.Event{Kind: "link-delay", Cause: gatewayDelay.String()})
			h.Topology().Each(func(p *faultproxy.Proxy) { p.Delay(gatewayDelay) })
			time.Sleep(gatewayDelayFor)
			h.Topology().Heal()
			h.Record(record.Event{Kind: "link-heal"})
			return nil
		}},
		{Name: "home-server-restart", Mode: "supercluster", Inject: func(_ context.Context, h *harness.Harness, _ *harness.Worker) error {
			return h.Down(h.Home(), ttl)
		}},
		cut("leaf-cut", "leaf", region(1), region(1), "blackhole", (*faultproxy.Proxy).Blackhole),
		cut("leaf-cut-loud", "leaf", region(1), region(1), "loud", (*faultproxy.Proxy).Refuse),
		{Name: "leaf-server-kill", Mode: "leaf",
			Prepare: func(ctx context.Context, h *harness.Harness, l *harness.Worker) error {
				return h.LeadFrom(ctx, l, h.Servers()[1], ttl)
			},
			Inject: func(_ context.Context, h *harness.Harness, _ *harness.Worker) error {
				return h.Down(h.Servers()[1], least)
			}},
	}
}

// ShortWorkerFaults are the faults of the workers that a -short run of
// -supercluster or -leaf injects besides the topology's own: a leader
// killed and stopped, a candidate killed, the leader paused past its
// validity, resumed stale, cut off from its server silently, one way and
// loudly, and its key deleted (also while it is cut off), purged and
// overwritten. The shorter pauses, the latency and the combinations are
// left to full runs.
var ShortWorkerFaults = []string{"leader-kill", "leader-stop", "candidate-kill", "pause-1.5", "pause-3", "stale-resume",
	"blackhole", "half-open", "reset", "key-delete", "cut-off-delete", "key-purge", "key-overwrite"}

// Chosen returns the scenarios a run of cfg injects: those named, or all
// that apply to its mode (in a -short run of -supercluster or -leaf, the
// topology's own, the fleet's and ShortWorkerFaults).
func Chosen(cfg harness.Config) []harness.Scenario {
	mode := cfg.Mode()
	var out []harness.Scenario
	for _, s := range All(cfg.TTL) {
		if s.Mode != "" && s.Mode != mode || s.FleetOnly && !cfg.Fleet || s.AgentsOnly && !cfg.Agents {
			continue
		}
		if len(cfg.Scenarios) == 0 && cfg.ShortTopology && s.Mode == "" && !s.FleetOnly && !slices.Contains(ShortWorkerFaults, s.Name) {
			continue
		}
		if len(cfg.Scenarios) == 0 || slices.Contains(cfg.Scenarios, s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// Names lists every scenario the harness knows.
func Names() []string {
	var names []string
	for _, s := range All(time.Second) {
		names = append(names, s.Name)
	}
	return names
}
