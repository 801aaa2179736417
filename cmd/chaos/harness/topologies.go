//go:build unix

package harness

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/topology"
)

// topology returns the servers of -supercluster or -leaf, and the proxies
// in front of the links between them.
//
// -supercluster: regions C1, C2, C3 of one server each (three servers a
// region would make nine server processes, too many for a machine of two
// cores to keep to the timings the checker holds the workers to), each a
// cluster of its own, joined by gateways. Server i reaches region j's
// gateway through a proxy of its own (i → j), so that the harness can cut
// any region off.
//
// -leaf: a hub with JetStream domain hub and a leaf node server with domain
// leaf, the leaf dialling the hub through a proxy (leaf → hub).
func (h *Harness) topology(o topology.Options) (*topology.Topology, error) {
	if !h.cfg.Leaf {
		return topology.Supercluster([]int{1, 1, 1}, o)
	}
	topo, err := topology.Leaf(o)
	if err != nil {
		return nil, err
	}
	// A leaf link notices a silent cut only by missed pings, at the leaf
	// server's ping interval (2 minutes by default): until then every
	// request to the hub times out rather than failing at once, and the
	// link comes back only after the leaf has dropped it. A ping a TTL
	// keeps that within a few TTLs, as docs/topologies.md advises.
	topo.Server("leaf").PingInterval = h.cfg.TTL
	return topo, nil
}

// Home returns the server that holds the bucket in -supercluster (C1's)
// and -leaf (the hub), nil in other modes.
func (h *Harness) Home() *topology.Process {
	if !h.cfg.Supercluster && !h.cfg.Leaf {
		return nil
	}
	return h.servers[0]
}

// regionForWorker returns the server a new worker connects to: that of
// the region with the fewest workers, the first of them on a tie. The
// first workers go to regions 1, 2, 3, 1, …, and a replacement to the
// region of the worker it replaces.
func (h *Harness) regionForWorker() *topology.Process {
	h.mu.Lock()
	load := map[string]int{}
	for _, w := range h.workers {
		load[w.region]++
	}
	h.mu.Unlock()
	var regions []string
	for _, sp := range h.servers {
		regions = append(regions, sp.Server.Region)
	}
	return h.servers[leastLoaded(regions, load)]
}

// leastLoaded returns the index of the region with the lowest load, the
// first of them on a tie.
func leastLoaded(regions []string, load map[string]int) int {
	best := 0
	for i, r := range regions {
		if load[r] < load[regions[best]] {
			best = i
		}
	}
	return best
}

// LeadFrom makes a worker of sp's region lead, if l is not one: it pauses
// (SIGSTOP) every worker of the other regions until one of sp's wins, or 4
// TTLs pass, then resumes them. A fleet run, and a region without workers
// (-workers below the regions), are left as they are.
func (h *Harness) LeadFrom(ctx context.Context, l *Worker, sp *topology.Process, ttl time.Duration) error {
	if h.cfg.Fleet || l.region == sp.Server.Region {
		return nil
	}
	h.mu.Lock()
	var others []*Worker
	for _, w := range h.workers {
		if w.region != sp.Server.Region {
			others = append(others, w)
		}
	}
	none := len(others) == len(h.workers)
	h.mu.Unlock()
	if none { // fewer workers than regions: the fault goes ahead as it is
		h.rec.Record(record.Event{Kind: "skipped", Target: sp.Server.Region, Cause: "no worker in the region to lead from"})
		return nil
	}
	h.drainWins()
	for _, w := range others {
		h.rec.Record(record.Event{Kind: "pause", Target: w.name, PID: w.cmd.Process.Pid})
		w.cmd.Process.Signal(syscall.SIGSTOP)
	}
	wait, cancel := context.WithTimeout(ctx, 4*ttl)
	defer cancel()
	won := false
	for !won {
		ev, ok := h.nextWin(wait)
		if !ok {
			break
		}
		h.mu.Lock()
		w := h.workers[ev.Worker]
		won = w != nil && w.region == sp.Server.Region
		h.mu.Unlock()
	}
	for _, w := range others {
		w.cmd.Process.Signal(syscall.SIGCONT)
		h.rec.Record(record.Event{Kind: "resume", Target: w.name, PID: w.cmd.Process.Pid})
	}
	if !won {
		return fmt.Errorf("no worker of %s won within %v while the others were paused", sp.Server.Region, 4*ttl)
	}
	return nil
}

// Isolate applies fault to every link to and from sp's region, and heals
// them once a leader has been announced since and least has passed, or
// once most has passed (as CutOff does for a worker's connections). The
// cut is recorded once the fault is in place and its end before the heal,
// so that every write sent within the record crossed a cut link (the
// checker's "leaders across a cut").
func (h *Harness) Isolate(ctx context.Context, sp *topology.Process, how string, fault func(*faultproxy.Proxy), least, most time.Duration) error {
	start := time.Now()
	h.topo.IsolateRegion(sp.Server.Region, fault)
	h.rec.Record(record.Event{Kind: "region-cut", Target: sp.Server.Region, Cause: how})
	wait, cancel := context.WithTimeout(ctx, most)
	defer cancel()
	if _, won := h.nextWin(wait); won {
		time.Sleep(time.Until(start.Add(least)))
	}
	h.rec.Record(record.Event{Kind: "region-heal", Target: sp.Server.Region})
	h.topo.Heal()
	return nil
}

// Down SIGKILLs sp, keeps it down for d, and restarts it; the checker
// counts its region as cut off ("down") until the restart, and nobody as
// able to lead if sp is the bucket's home.
func (h *Harness) Down(sp *topology.Process, d time.Duration) error {
	h.KillServer(sp)
	h.rec.Record(record.Event{Kind: "region-cut", Target: sp.Server.Region, Cause: "down"})
	time.Sleep(d)
	h.rec.Record(record.Event{Kind: "region-heal", Target: sp.Server.Region})
	return h.StartServer(sp)
}
