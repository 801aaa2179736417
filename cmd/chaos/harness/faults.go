//go:build unix

package harness

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
	"github.com/kvelect/election/cmd/chaos/worker"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/topology"
	"github.com/nats-io/nats.go/jetstream"
)

// Burst is how many nodes join, or leave, at once in a fleet run.
const Burst = 3

// PauseServer pauses the server pick returns for d.
func (h *Harness) PauseServer(ctx context.Context, d time.Duration, pick func(*Harness, context.Context) (*topology.Process, error)) error {
	sp, err := pick(h, ctx)
	if err != nil {
		return err
	}
	h.PauseServers(d, sp)
	return nil
}

// ServerOf returns the server w's connection is on, as w last said.
func (h *Harness) ServerOf(w *Worker) (*topology.Process, error) {
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

// PauseServers stops servers with SIGSTOP for d, then continues them.
func (h *Harness) PauseServers(d time.Duration, sps ...*topology.Process) {
	h.StopServers(sps...)
	time.Sleep(d)
	h.ContinueServers(sps...)
}

// StopServers stops servers with SIGSTOP, recording it.
func (h *Harness) StopServers(sps ...*topology.Process) {
	for _, sp := range sps {
		h.rec.Record(record.Event{Kind: "server-pause", Target: sp.Server.Name, PID: sp.Pid()})
		sp.Signal(syscall.SIGSTOP)
	}
}

// ContinueServers continues stopped servers, recording it.
func (h *Harness) ContinueServers(sps ...*topology.Process) {
	for _, sp := range sps {
		sp.Signal(syscall.SIGCONT)
		h.rec.Record(record.Event{Kind: "server-resume", Target: sp.Server.Name, PID: sp.Pid()})
	}
}

// FaultKey returns the key that key faults hit: the election key, or in
// a fleet run the key of the first daemon the leader runs.
func (h *Harness) FaultKey(l *Worker) string {
	if !h.cfg.Fleet {
		return worker.ElectionKey
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.cfg.DaemonNames() {
		if h.holders[d] == l.name {
			return fleet.DaemonKey(d)
		}
	}
	return fleet.DaemonKey(h.cfg.DaemonNames()[0])
}

// LeaveBurst stops burst nodes at once (all but one if fewer are left),
// the leader first, without replacing them: each leaves the fleet and
// hands its daemons over.
func (h *Harness) LeaveBurst(l *Worker) error {
	leaving := []*Worker{l}
	h.mu.Lock()
	for _, w := range h.workers {
		if w != l && len(leaving) < min(Burst, len(h.workers)-1) {
			leaving = append(leaving, w)
		}
	}
	h.mu.Unlock()
	h.stopAll(leaving)
	return nil
}

// StopGuard stops (SIGSTOP) the guard of one of the leader's daemons, runs
// also with the daemon's name, and continues the guard hold later, if it
// still runs.
func (h *Harness) StopGuard(l *Worker, hold time.Duration, also func(daemon string) error) error {
	h.mu.Lock()
	var a *actorProc
	for _, d := range h.cfg.DaemonNames() {
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

// StaleResume pauses the leader until a successor leads, cuts the successor
// off, and resumes the old leader: past its validity deadline, it sees the
// successor's write over its key and must stand down without vouching for
// it, since the cut-off successor still believes it leads.
func (h *Harness) StaleResume(ctx context.Context, l *Worker, ttl time.Duration) error {
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
	return h.CutOff(ctx, successor, ttl, 4*ttl, (*faultproxy.Proxy).Blackhole, resume)
}

// CutOff applies a fault to the leader's connections, then runs also, and
// heals the fault once another leader is announced and at least least has
// passed, or once most has passed. Holding it for a TTL lets a cut-off
// leader stand down by itself: healing earlier would let it learn of its
// loss and hide an overlap.
func (h *Harness) CutOff(ctx context.Context, l *Worker, least, most time.Duration, fault func(*faultproxy.Proxy), also func() error) error {
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

// Outage SIGKILLs servers, keeps them down for d, and restarts them. The
// harness records the outage so the checker can tell whether anyone was
// announced while it lasted.
func (h *Harness) Outage(d time.Duration, down ...*topology.Process) error {
	for _, sp := range down {
		h.KillServer(sp)
	}
	h.rec.Record(record.Event{Kind: "outage-start", Target: fmt.Sprint(len(down))})
	time.Sleep(d)
	h.rec.Record(record.Event{Kind: "outage-end"})
	for _, sp := range down {
		if err := h.StartServer(sp); err != nil {
			return err
		}
	}
	return nil
}

// StreamLeader returns the server that leads the election bucket's stream.
func (h *Harness) StreamLeader(ctx context.Context) (*topology.Process, error) {
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

// StreamFollower returns a server that holds a replica but does not lead.
func (h *Harness) StreamFollower(ctx context.Context) (*topology.Process, error) {
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

func (h *Harness) streamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	var info *jetstream.StreamInfo
	err := worker.Retry(ctx, 5*time.Second, func(ctx context.Context) error {
		s, err := h.js.Stream(ctx, "KV_"+worker.BucketName)
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
