//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/topology"
	"github.com/nats-io/nats.go/jetstream"
)

// scenario is one fault, injected against the current leader (or around
// it), healed before it returns. In a fleet run, the leader is the node
// running the most daemons, and the key one of its daemons' keys.
type scenario struct {
	name string
	// where it applies: "" for every mode, else one of config.mode's
	// names (single, cluster, supercluster, leaf).
	mode string
	// fleetOnly: membership changes of a fleet run.
	fleetOnly bool
	// agentsOnly: faults of an -agents run's processes.
	agentsOnly bool
	// prepare, if set, runs before the fault (and before it is recorded),
	// against the leader; the fault aims at the leader settled after it.
	prepare func(ctx context.Context, h *harness, leader *workerProc) error
	inject  func(ctx context.Context, h *harness, leader *workerProc) error
}

// burst is how many nodes join, or leave, at once in a fleet run.
const burst = 3

// scenarios lists every fault the harness knows, in the order of a round.
func scenarios(ttl time.Duration) []scenario {
	times := func(k float64) time.Duration { return time.Duration(k * float64(ttl)) }
	return append([]scenario{
		{name: "join-burst", fleetOnly: true, inject: func(_ context.Context, h *harness, _ *workerProc) error {
			for range burst {
				if err := h.spawnWorker(); err != nil {
					return err
				}
			}
			return nil
		}},
		{name: "leave-burst", fleetOnly: true, inject: func(_ context.Context, h *harness, l *workerProc) error {
			return h.leaveBurst(l)
		}},
		{name: "leader-kill", inject: func(_ context.Context, h *harness, l *workerProc) error { return h.kill(l) }},
		{name: "leader-stop", inject: func(_ context.Context, h *harness, l *workerProc) error { return h.stop(l) }},
		// The guard between the leader's agent and one of its daemons
		// stopped (SIGSTOP), then the daemon's key deleted, or the agent
		// leaving: the agent must kill the daemon itself.
		{name: "guard-stop", agentsOnly: true, inject: func(ctx context.Context, h *harness, l *workerProc) error {
			return h.stopGuard(l, 2*ttl, func(daemon string) error { return h.kv.Delete(ctx, fleet.DaemonKey(daemon)) })
		}},
		{name: "guard-stop-leave", agentsOnly: true, inject: func(_ context.Context, h *harness, l *workerProc) error {
			return h.stopGuard(l, 0, func(string) error { return h.stop(l) })
		}},
		{name: "candidate-kill", inject: func(_ context.Context, h *harness, l *workerProc) error {
			c := h.candidate(l)
			if c == nil {
				return errors.New("no candidate to kill")
			}
			return h.kill(c)
		}},
		{name: "pause-0.3", inject: pause(times(0.3))},
		{name: "pause-1", inject: pause(times(1))},
		{name: "pause-1.5", inject: pause(times(1.5))},
		{name: "pause-3", inject: pause(times(3))},
		{name: "stale-resume", inject: func(ctx context.Context, h *harness, l *workerProc) error {
			return h.staleResume(ctx, l, ttl)
		}},
		{name: "blackhole", inject: network(ttl, 4*ttl, (*faultproxy.Proxy).Blackhole)},
		{name: "half-open", inject: network(ttl, 4*ttl, (*faultproxy.Proxy).HalfOpen)},
		{name: "latency", inject: network(ttl, 4*ttl, func(p *faultproxy.Proxy) { p.Delay(times(1.5)) })},
		{name: "reset", inject: func(_ context.Context, h *harness, l *workerProc) error {
			for _, p := range l.proxies {
				p.Reset()
			}
			return nil
		}},
		{name: "key-delete", inject: func(ctx context.Context, h *harness, l *workerProc) error {
			return h.kv.Delete(ctx, h.faultKey(l))
		}},
		{name: "cut-off-delete", inject: func(ctx context.Context, h *harness, l *workerProc) error {
			// The leader cannot see its key deleted: only the announce delay
			// keeps the next winner from overlapping it.
			key := h.faultKey(l)
			return h.cutOff(ctx, l, ttl, 4*ttl, (*faultproxy.Proxy).Blackhole, func() error {
				return h.kv.Delete(ctx, key)
			})
		}},
		{name: "key-purge", inject: func(ctx context.Context, h *harness, l *workerProc) error {
			return h.kv.Purge(ctx, h.faultKey(l))
		}},
		{name: "key-overwrite", inject: func(ctx context.Context, h *harness, l *workerProc) error {
			_, err := h.kv.Put(ctx, h.faultKey(l), []byte("rogue"))
			return err
		}},
		{name: "server-restart", mode: "single", inject: func(_ context.Context, h *harness, _ *workerProc) error {
			sp := h.servers[0]
			h.killServer(sp)
			return h.startServer(sp)
		}},
		{name: "stream-leader-restart", mode: "cluster", inject: func(ctx context.Context, h *harness, _ *workerProc) error {
			sp, err := h.streamLeader(ctx)
			if err != nil {
				return err
			}
			h.killServer(sp)
			return h.startServer(sp)
		}},
		{name: "minority-down", mode: "cluster", inject: func(ctx context.Context, h *harness, _ *workerProc) error {
			sp, err := h.streamFollower(ctx)
			if err != nil {
				return err
			}
			return h.outage(2*ttl, sp)
		}},
		{name: "quorum-loss", mode: "cluster", inject: func(ctx context.Context, h *harness, _ *workerProc) error {
			return h.outage(3*ttl, h.servers[0], h.servers[1])
		}},
		{name: "combo", inject: func(ctx context.Context, h *harness, l *workerProc) error {
			return h.combo(ctx, l, ttl)
		}},
		// Servers paused (SIGSTOP), alive to the kernel, their connections
		// open: a stream leader that stops answering, and one that comes
		// back after its peers moved on.
		{name: "stream-leader-pause-0.5", mode: "cluster", inject: serverPause(times(0.5), (*harness).streamLeader)},
		{name: "stream-leader-pause-3", mode: "cluster", inject: serverPause(times(3), (*harness).streamLeader)},
		{name: "follower-pause-3", mode: "cluster", inject: serverPause(times(3), (*harness).streamFollower)},
		{name: "leaders-server-pause-3", mode: "cluster", inject: func(_ context.Context, h *harness, l *workerProc) error {
			sp, err := h.serverOf(l)
			if err != nil { // an agent does not say: nothing to aim at
				h.rec.Record(record.Event{Kind: "skipped", Target: l.name, Cause: err.Error()})
				return nil
			}
			h.pauseServers(times(3), sp)
			return nil
		}},
		// Route partitions: a server cut off from its peers (every route
		// to and from it silent) while it runs and its clients stay
		// connected; and one whose routes carry traffic one way only.
		{name: "stream-leader-cut-4", mode: "cluster", inject: routeCut(times(4), (*harness).streamLeader, (*faultproxy.Proxy).Blackhole)},
		{name: "follower-cut-4", mode: "cluster", inject: routeCut(times(4), (*harness).streamFollower, (*faultproxy.Proxy).Blackhole)},
		{name: "stream-leader-one-way-4", mode: "cluster", inject: routeCut(times(4), (*harness).streamLeader, (*faultproxy.Proxy).HalfOpen)},
		// Jepsen's sequence behind nats-server issue 7567: two servers
		// paused, the third killed and restarted meanwhile, the two resumed,
		// then two others paused.
		{name: "jepsen-7567", mode: "cluster", inject: func(ctx context.Context, h *harness, _ *workerProc) error {
			a, b, c := h.servers[0], h.servers[1], h.servers[2]
			h.stopServers(a, b)
			h.killServer(c)
			if err := h.startServer(c); err != nil {
				h.continueServers(a, b)
				return err
			}
			h.continueServers(a, b)
			h.pauseServers(times(1), c, a)
			return nil
		}},
	}, topologyScenarios(ttl)...)
}

// serverPause pauses the server pick returns for d.
func serverPause(d time.Duration, pick func(*harness, context.Context) (*topology.Process, error)) func(context.Context, *harness, *workerProc) error {
	return func(ctx context.Context, h *harness, _ *workerProc) error {
		sp, err := pick(h, ctx)
		if err != nil {
			return err
		}
		h.pauseServers(d, sp)
		return nil
	}
}

// serverOf returns the server w's connection is on, as w last said.
func (h *harness) serverOf(w *workerProc) (*topology.Process, error) {
	h.mu.Lock()
	name := w.server
	h.mu.Unlock()
	for _, sp := range h.servers {
		if sp.Server.Name == name {
			return sp, nil
		}
	}
	return nil, fmt.Errorf("%s has not said which server it is connected to (%q)", w.name, name)
}

// routeCut applies fault to every route to and from the server pick
// returns, for d, then heals them.
func routeCut(d time.Duration, pick func(*harness, context.Context) (*topology.Process, error), fault func(*faultproxy.Proxy)) func(context.Context, *harness, *workerProc) error {
	return func(ctx context.Context, h *harness, _ *workerProc) error {
		sp, err := pick(h, ctx)
		if err != nil {
			return err
		}
		h.rec.Record(record.Event{Kind: "route-cut", Target: sp.Server.Name})
		h.topo.IsolateServer(sp.Server.Name, fault)
		time.Sleep(d)
		h.topo.Heal()
		h.rec.Record(record.Event{Kind: "route-heal", Target: sp.Server.Name})
		return nil
	}
}

// pauseServers stops servers with SIGSTOP for d, then continues them.
func (h *harness) pauseServers(d time.Duration, sps ...*topology.Process) {
	h.stopServers(sps...)
	time.Sleep(d)
	h.continueServers(sps...)
}

// stopServers stops servers with SIGSTOP, recording it.
func (h *harness) stopServers(sps ...*topology.Process) {
	for _, sp := range sps {
		h.rec.Record(record.Event{Kind: "server-pause", Target: sp.Server.Name, PID: sp.Pid()})
		sp.Signal(syscall.SIGSTOP)
	}
}

// continueServers continues stopped servers, recording it.
func (h *harness) continueServers(sps ...*topology.Process) {
	for _, sp := range sps {
		sp.Signal(syscall.SIGCONT)
		h.rec.Record(record.Event{Kind: "server-resume", Target: sp.Server.Name, PID: sp.Pid()})
	}
}

// faultKey returns the key that key faults hit: the election key, or in
// a fleet run the key of the first daemon the leader runs.
func (h *harness) faultKey(l *workerProc) string {
	if !h.cfg.fleet {
		return electionKey
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.cfg.daemonNames() {
		if h.holders[d] == l.name {
			return fleet.DaemonKey(d)
		}
	}
	return fleet.DaemonKey(h.cfg.daemonNames()[0])
}

// leaveBurst stops burst nodes at once (all but one if fewer are left),
// the leader first, without replacing them: each leaves the fleet and
// hands its daemons over.
func (h *harness) leaveBurst(l *workerProc) error {
	leaving := []*workerProc{l}
	h.mu.Lock()
	for _, w := range h.workers {
		if w != l && len(leaving) < min(burst, len(h.workers)-1) {
			leaving = append(leaving, w)
		}
	}
	h.mu.Unlock()
	h.stopAll(leaving)
	return nil
}

// stopGuard stops (SIGSTOP) the guard of one of the leader's daemons, runs
// also with the daemon's name, and continues the guard hold later, if it
// still runs.
func (h *harness) stopGuard(l *workerProc, hold time.Duration, also func(daemon string) error) error {
	h.mu.Lock()
	var a *actorProc
	for _, d := range h.cfg.daemonNames() {
		if h.holders[d] == l.name && h.holderActor[d] != nil {
			a = h.holderActor[d]
			break
		}
	}
	h.mu.Unlock()
	if a == nil {
		return fmt.Errorf("no daemon's actor of %s to stop the guard of", l.name)
	}
	guard, err := guardOf(a.pid)
	if err != nil {
		return fmt.Errorf("daemon %s on %s: %w", a.daemon, l.name, err)
	}
	h.rec.Record(record.Event{Kind: "guard-pause", Target: l.name, Daemon: a.daemon, PID: a.pid})
	syscall.Kill(guard, syscall.SIGSTOP)
	err = also(a.daemon)
	time.Sleep(hold)
	if isGuard(guard) { // its agent kills it once the daemon is gone
		syscall.Kill(guard, syscall.SIGCONT)
	}
	h.rec.Record(record.Event{Kind: "guard-resume", Target: l.name, Daemon: a.daemon, PID: a.pid})
	return err
}

// guardOf returns the process ID of the guard above process pid, an
// actor: its nearest ancestor named kvelect-guard, found in /proc.
func guardOf(pid int) (int, error) {
	for p, depth := pid, 0; p > 1 && depth < 10; depth++ {
		if isGuard(p) {
			return p, nil
		}
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			return 0, fmt.Errorf("the guard of actor %d: %w", pid, err)
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		p, _ = strconv.Atoi(fields[1])
	}
	return 0, fmt.Errorf("no kvelect-guard above actor %d", pid)
}

// isGuard reports whether process pid is a guard of an agent's daemon.
func isGuard(pid int) bool {
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return string(comm) == "kvelect-guard\n"
}

// pause stops the leader for d.
func pause(d time.Duration) func(context.Context, *harness, *workerProc) error {
	return func(_ context.Context, h *harness, l *workerProc) error {
		h.pause(l, d)
		return nil
	}
}

// staleResume pauses the leader until a successor leads, cuts the successor
// off, and resumes the old leader: past its validity deadline, it sees the
// successor's write over its key and must stand down without vouching for
// it, since the cut-off successor still believes it leads.
func (h *harness) staleResume(ctx context.Context, l *workerProc, ttl time.Duration) error {
	h.rec.Record(record.Event{Kind: "pause", Target: l.name, PID: l.cmd.Process.Pid})
	l.cmd.Process.Signal(syscall.SIGSTOP)
	resume := func() error {
		l.cmd.Process.Signal(syscall.SIGCONT)
		h.rec.Record(record.Event{Kind: "resume", Target: l.name, PID: l.cmd.Process.Pid})
		return nil
	}
	wait, cancel := context.WithTimeout(ctx, 4*ttl)
	defer cancel()
	won, ok := h.nextWin(wait)
	h.mu.Lock()
	successor := h.workers[won.Worker]
	h.mu.Unlock()
	if !ok || successor == nil {
		resume()
		return errors.New("no successor while the leader was paused")
	}
	return h.cutOff(ctx, successor, ttl, 4*ttl, (*faultproxy.Proxy).Blackhole, resume)
}

// network applies a fault to the leader's connections (see cutOff).
func network(least, most time.Duration, fault func(*faultproxy.Proxy)) func(context.Context, *harness, *workerProc) error {
	return func(ctx context.Context, h *harness, l *workerProc) error {
		return h.cutOff(ctx, l, least, most, fault, func() error { return nil })
	}
}

// cutOff applies a fault to the leader's connections, then runs also, and
// heals the fault once another leader is announced and at least least has
// passed, or once most has passed. Holding it for a TTL lets a cut-off
// leader stand down by itself: healing earlier would let it learn of its
// loss and hide an overlap.
func (h *harness) cutOff(ctx context.Context, l *workerProc, least, most time.Duration, fault func(*faultproxy.Proxy), also func() error) error {
	start := time.Now()
	for _, p := range l.proxies {
		fault(p)
	}
	defer func() {
		for _, p := range l.proxies {
			p.Heal()
		}
	}()
	if err := also(); err != nil {
		return err
	}
	wait, cancel := context.WithTimeout(ctx, most)
	defer cancel()
	if _, won := h.nextWin(wait); won {
		time.Sleep(time.Until(start.Add(least)))
	}
	return nil
}

// outage SIGKILLs servers, keeps them down for d, and restarts them. The
// harness records the outage so the checker can tell whether anyone was
// announced while it lasted.
func (h *harness) outage(d time.Duration, down ...*topology.Process) error {
	for _, sp := range down {
		h.killServer(sp)
	}
	h.rec.Record(record.Event{Kind: "outage-start", Target: fmt.Sprint(len(down))})
	time.Sleep(d)
	h.rec.Record(record.Event{Kind: "outage-end"})
	for _, sp := range down {
		if err := h.startServer(sp); err != nil {
			return err
		}
	}
	return nil
}

// streamLeader returns the server that leads the election bucket's stream.
func (h *harness) streamLeader(ctx context.Context) (*topology.Process, error) {
	info, err := h.streamInfo(ctx)
	if err != nil {
		return nil, err
	}
	for _, sp := range h.servers {
		if sp.Server.Name == info.Cluster.Leader {
			return sp, nil
		}
	}
	return nil, fmt.Errorf("stream leader %q is not one of the harness's servers", info.Cluster.Leader)
}

// streamFollower returns a server that holds a replica but does not lead.
func (h *harness) streamFollower(ctx context.Context) (*topology.Process, error) {
	info, err := h.streamInfo(ctx)
	if err != nil {
		return nil, err
	}
	for _, sp := range h.servers {
		if sp.Server.Name != info.Cluster.Leader {
			return sp, nil
		}
	}
	return nil, errors.New("no stream follower")
}

func (h *harness) streamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	var info *jetstream.StreamInfo
	err := retry(ctx, 5*time.Second, func(ctx context.Context) error {
		s, err := h.js.Stream(ctx, "KV_"+bucketName)
		if err != nil {
			return err
		}
		info, err = s.Info(ctx)
		if err == nil && (info.Cluster == nil || info.Cluster.Leader == "") {
			err = errors.New("the stream has no leader yet")
		}
		return err
	})
	return info, err
}
