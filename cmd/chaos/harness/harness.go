//go:build unix

// Package harness is the chaos harness's process control: it starts the
// run's servers (internal/topology) and worker processes (package worker)
// behind fault proxies, follows who leads, and injects faults into them
// (kills, stops, pauses, cuts, key writes, outages, the combinations),
// recording each in its own history (package record). Run injects the
// scenarios package scenario chooses; what the histories say is for
// package check to judge.
package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/chaos/check"
	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/cmd/chaos/worker"
	"github.com/kvelect/election/fence"
	lhistory "github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/topology"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Harness runs the servers and workers of one chaos run, injects faults
// and keeps the harness's own history.
type Harness struct {
	cfg  Config
	dir  string
	self string
	rec  *record.Recorder
	t0   int64

	rngMu sync.Mutex
	rng   *rand.Rand // the combinations' draws, from the run's seed

	servers []*topology.Process
	topo    *topology.Topology // the servers and the proxies on the links between them
	admin   *nats.Conn
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	audit   *audit

	mu      sync.Mutex
	workers map[string]*Worker
	// holders maps each daemon to the worker whose won event for it came
	// last and has not lost it since; a single-key run has one daemon, "".
	holders map[string]string
	// settled holds the daemons whose holder renewed since it won and since
	// the last fault.
	settled map[string]bool
	// settledFrom is when the last unsettle happened: only a renewal sent
	// after it settles a holder (one in flight across a fault does not).
	settledFrom int64
	nextID      int
	wins        chan record.Event // won events, one at least since drainWins if any came
	changed     chan struct{}     // signalled when holders or settled may have changed

	// An -agents run's: the election binary its agents run, the socket
	// their daemons' actors write their records to, the actors connected
	// (those that sent their start record), and which of them made each
	// daemon's entry in holders.
	agentBin    string
	actorLn     net.Listener
	actorConns  int
	nextActor   int
	actors      map[*actorProc]bool
	holderActor map[string]*actorProc
}

// Worker is a worker process, a fleet's node or an agent, and its proxies.
type Worker struct {
	name     string
	region   string // -supercluster, -leaf: the region of the one server it connects to
	joined   bool   // a fleet run's node or agent has joined the fleet
	server   string // the server its connection is on, as it last said (workers)
	cmd      *exec.Cmd
	proxies  []*faultproxy.Proxy
	done     chan struct{}
	expected bool // its exit was asked for (kill, stop)
	// hold is the worker's stdin: once its election has stopped, the
	// worker exits only when hold is closed. An agent has none.
	hold io.Closer
}

// New returns the harness of a run that keeps its histories in dir.
func New(cfg Config, dir string) (*Harness, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "harness.jsonl"))
	if err != nil {
		return nil, err
	}
	return &Harness{
		cfg: cfg, dir: dir, self: self, rec: record.New(f, "harness"), t0: record.Now(), rng: newRand(cfg.Seed),
		workers: map[string]*Worker{}, holders: map[string]string{}, settled: map[string]bool{},
		wins: make(chan record.Event, 4096), changed: make(chan struct{}, 1),
		actors: map[*actorProc]bool{}, holderActor: map[string]*actorProc{},
	}, nil
}

// startServers starts the run's servers, each a process of its own, and
// the proxies on the links between them, and waits until they work
// together: one server; with -cluster three, each reaching each peer
// through a proxy of its own (route i → j), so that the harness can cut any
// pair; with -supercluster or -leaf the topology's (topologies.go).
func (h *Harness) startServers(ctx context.Context) error {
	o := topology.Options{Dir: h.dir, SyncAlways: h.cfg.SyncAlways}
	var topo *topology.Topology
	var err error
	switch {
	case h.cfg.Cluster:
		o.ProxyRoutes = true
		topo, err = topology.Cluster("chaos", 3, o)
	case h.cfg.Supercluster || h.cfg.Leaf:
		topo, err = h.topology(o)
	default:
		topo, err = topology.Single(o)
	}
	if err != nil {
		return err
	}
	h.topo = topo
	for _, s := range topo.Servers {
		h.servers = append(h.servers, topology.NewProcess(s, topology.Self(), os.Stderr))
	}
	if err := h.startAll(); err != nil {
		return err
	}
	return topo.AwaitFormed(ctx, worker.StartTimeout)
}

// startAll starts every server of h.servers at once and waits until each
// accepts clients.
func (h *Harness) startAll() error {
	errs := make(chan error, len(h.servers))
	for _, sp := range h.servers {
		go func() { errs <- h.StartServer(sp) }()
	}
	for range h.servers {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// StartServer starts (or restarts) a server process and waits until it
// accepts clients.
func (h *Harness) StartServer(sp *topology.Process) error {
	if err := sp.Start(); err != nil {
		return err
	}
	h.rec.Record(record.Event{Kind: "server-up", Target: sp.Server.Name, PID: sp.Pid()})
	return nil
}

// KillServer SIGKILLs a server process and waits for it to die.
func (h *Harness) KillServer(sp *topology.Process) {
	h.rec.Record(record.Event{Kind: "server-kill", Target: sp.Server.Name, PID: sp.Pid()})
	sp.Kill()
}

// serverURLs returns the servers' own URLs, comma separated.
func (h *Harness) serverURLs() string { return urlsOf(h.servers) }

// urlsOf returns the servers' own URLs, comma separated.
func urlsOf(servers []*topology.Process) string {
	var urls []string
	for _, sp := range servers {
		urls = append(urls, sp.Server.ClientURL())
	}
	return strings.Join(urls, ",")
}

// setup connects the harness's own client straight to the servers (never
// through a proxy; in -supercluster and -leaf to the bucket's home server
// only, which no cut separates from the bucket) and creates the election
// bucket and the fenced resource.
func (h *Harness) setup(ctx context.Context) error {
	admin := h.serverURLs()
	if h.Home() != nil {
		admin = urlsOf([]*topology.Process{h.Home()})
	}
	nc, err := nats.Connect(admin, nats.Name("chaos-harness"), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return err
	}
	h.admin = nc
	h.js, err = jetstream.New(nc)
	if err != nil {
		return err
	}
	replicas, placement := len(h.servers), (*jetstream.Placement)(nil)
	if home := h.Home(); home != nil {
		replicas = 1
		if h.cfg.Supercluster {
			placement = &jetstream.Placement{Cluster: home.Server.Region}
		}
	}
	err = worker.Retry(ctx, 5*time.Second, func(ctx context.Context) error {
		cfg := jetstream.KeyValueConfig{Bucket: worker.BucketName, TTL: h.cfg.TTL, Replicas: replicas, Placement: placement,
			RePublish: &jetstream.RePublish{Source: ">", Destination: recordPrefix + ">"}}
		if h.cfg.Markers {
			cfg.LimitMarkerTTL = time.Second
		}
		kv, err := h.js.CreateKeyValue(ctx, cfg)
		if err != nil {
			return err
		}
		// The key faults' writes are recorded with the workers' for the
		// linearizability check.
		h.kv = &record.KV{KeyValue: kv, Rec: h.rec}
		// Created from the home server, without a placement of its own,
		// the history stream goes where its request came from.
		if _, err := lhistory.Create(ctx, h.js, worker.BucketName, time.Hour); err != nil {
			return err
		}
		_, err = h.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: worker.FenceStream, Subjects: []string{worker.FenceSubject, worker.FenceSubject + ".>"}, Replicas: replicas, Placement: placement,
		})
		return err
	})
	if err != nil {
		return err
	}
	h.audit, err = startAudit(ctx, h.js, h.serverURLs(), filepath.Join(h.dir, "audit.jsonl"))
	return err
}

// dumpFence writes every record the fenced resource accepted, in order, to
// fence.jsonl, each with the token package fence put in its Fencing-Token
// header, so that the checker's count of stale tokens accepted is the
// fence's. After a server restart the stream may take a while to elect a
// leader, so reading is retried.
func (h *Harness) dumpFence() {
	f, err := os.Create(filepath.Join(h.dir, "fence.jsonl"))
	if err != nil {
		return
	}
	defer f.Close()
	out := record.New(f, "fence")
	var records []record.Event
	err = worker.Retry(context.Background(), 30*time.Second, func(ctx context.Context) error {
		records = records[:0]
		s, err := h.js.Stream(ctx, worker.FenceStream)
		if err != nil {
			return err
		}
		last := s.CachedInfo().State.LastSeq
		c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		for seen := uint64(0); seen < last; {
			batch, err := c.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				return err
			}
			for m := range batch.Messages() {
				meta, err := m.Metadata()
				if err != nil {
					return err
				}
				seen = meta.Sequence.Stream
				token, err := fence.HeaderToken(m.Headers())
				if err != nil {
					return fmt.Errorf("sequence %d: %w", seen, err)
				}
				var r worker.Fence
				if err := json.Unmarshal(m.Data(), &r); err != nil {
					return err
				}
				daemon := strings.TrimPrefix(strings.TrimPrefix(m.Subject(), worker.FenceSubject), ".")
				records = append(records, record.Event{Kind: "fence", Daemon: daemon, Rev: seen, Token: token, Worker: r.Worker, Seq: r.Seq, PID: r.PID, Sent: r.Sent})
			}
			if err := batch.Error(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		out.Record(record.Event{Kind: "fence-error", Err: err.Error()})
		return
	}
	for _, r := range records {
		out.Record(r)
	}
}

// dumpLeadership writes what the bucket's leadership history recorded, in
// order, to leadership.jsonl, for the checker to compare with the workers'
// own records. Reading is retried, as for the fence.
func (h *Harness) dumpLeadership() {
	f, err := os.Create(filepath.Join(h.dir, "leadership.jsonl"))
	if err != nil {
		return
	}
	defer f.Close()
	out := record.New(f, "leadership")
	var events []lhistory.Event
	err = worker.Retry(context.Background(), 30*time.Second, func(ctx context.Context) error {
		history, err := lhistory.Open(ctx, h.js, worker.BucketName)
		if err != nil {
			return err
		}
		events, err = history.Events(ctx, "", time.Time{})
		return err
	})
	if err != nil {
		out.Record(record.Event{Kind: "leadership-error", Err: err.Error()})
		return
	}
	for _, ev := range events {
		out.Record(record.Event{Kind: "recorded-" + ev.Kind, Target: ev.Name, Token: ev.Token, Cause: ev.After + ev.Cause})
	}
}

// SpawnWorker starts a campaigner process, a fleet's node or an agent,
// behind one proxy per server.
func (h *Harness) SpawnWorker() error {
	h.mu.Lock()
	id := h.nextID
	h.nextID++
	h.mu.Unlock()
	name := fmt.Sprintf("w%d", id)

	w := &Worker{name: name, done: make(chan struct{})}
	servers := h.servers
	if h.Home() != nil {
		sp := h.regionForWorker()
		servers, w.region = []*topology.Process{sp}, sp.Server.Region
	}
	var urls []string
	for _, sp := range servers {
		p, err := faultproxy.New(fmt.Sprintf("127.0.0.1:%d", sp.Server.ClientPort))
		if err != nil {
			return err
		}
		w.proxies = append(w.proxies, p)
		urls = append(urls, p.URL())
	}
	if h.cfg.Agents {
		return h.spawnAgent(w, strings.Join(urls, ","))
	}
	args := []string{"worker", "-name", name, "-urls", strings.Join(urls, ","),
		"-bucket", worker.BucketName, "-key", worker.ElectionKey}
	if h.cfg.Fleet {
		args = []string{"node", "-name", name, "-urls", strings.Join(urls, ","),
			"-bucket", worker.BucketName, "-daemons", strings.Join(h.cfg.DaemonNames(), ",")}
	}
	if h.cfg.TTL < election.MinTTL {
		args = append(args, "-unsafe-short-ttl")
	}
	if h.cfg.Leaf && w.region != h.Home().Server.Region { // the bucket is in the hub's domain
		args = append(args, "-domain", h.Home().Server.Region)
	}
	if !h.cfg.Fleet && h.cfg.StopDelay > 0 {
		args = append(args, "-stop-delay", h.cfg.StopDelay.String())
	}
	if h.cfg.Priorities { // 1, 2, … by start order, a replacement taking the next
		args = append(args, "-priority", strconv.Itoa(id+1), "-prefer-higher", h.cfg.TTL.String())
	}
	cmd := exec.Command(h.self, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if w.hold, err = cmd.StdinPipe(); err != nil {
		return err
	}
	history, err := os.Create(filepath.Join(h.dir, "worker-"+name+".jsonl"))
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	w.cmd = cmd
	h.mu.Lock()
	h.workers[name] = w
	h.mu.Unlock()
	h.rec.Record(record.Event{Kind: "spawn", Target: name, PID: cmd.Process.Pid, Region: w.region})

	go func() {
		h.follow(out, history)
		cmd.Wait()
		history.Close()
		h.exited(w)
	}()
	return nil
}

// exited closes the proxies of a worker whose process has exited, forgets
// what it held, and records its exit: a crash unless it was asked for.
func (h *Harness) exited(w *Worker) {
	for _, p := range w.proxies {
		p.Close()
	}
	h.mu.Lock()
	crashed := !w.expected
	for d, holder := range h.holders {
		if holder == w.name {
			delete(h.holders, d)
			delete(h.holderActor, d)
		}
	}
	h.mu.Unlock()
	h.signal()
	if crashed {
		h.rec.Record(record.Event{Kind: "crash", Target: w.name, Cause: w.cmd.ProcessState.String()})
	}
	h.rec.Record(record.Event{Kind: "exit", Target: w.name, PID: w.cmd.Process.Pid})
	close(w.done)
}

// follow copies a worker's history to its file and tracks who holds each
// daemon.
func (h *Harness) follow(out io.Reader, history io.Writer) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Bytes()
		history.Write(append(line, '\n'))
		var ev record.Event
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		h.mu.Lock()
		switch {
		case ev.Kind == "won":
			h.holders[ev.Daemon], h.settled[ev.Daemon] = ev.Worker, false
			select {
			case h.wins <- ev:
			default: // wins are waiting already
			}
		case ev.Kind == "lost" && h.holders[ev.Daemon] == ev.Worker:
			delete(h.holders, ev.Daemon)
		case ev.LeaseWrite() && ev.Op == "update" && h.holders[ev.Daemon] == ev.Worker && ev.Sent > h.settledFrom:
			h.settled[ev.Daemon] = true
		case ev.Kind == "joined":
			if w := h.workers[ev.Worker]; w != nil {
				w.joined = true
			}
		case ev.Kind == "connected":
			if w := h.workers[ev.Worker]; w != nil {
				w.server = ev.Target
			}
		}
		h.mu.Unlock()
		h.signal()
	}
}

// signal tells whoever waits on changed that holders or settled may have
// changed.
func (h *Harness) signal() {
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

// unsettle marks every holder as not settled until it renews: a fault is
// being injected or was just healed.
func (h *Harness) unsettle() {
	h.mu.Lock()
	clear(h.settled)
	h.settledFrom = record.Now()
	h.mu.Unlock()
}

// currentLeader returns the leader once it has renewed since it won and
// since the last fault, waiting for that if need be. In a fleet run it
// waits until every node has joined, every daemon runs on a node that
// renewed it since the last fault, and the spread is within one daemon;
// then it returns the node that runs the most daemons.
func (h *Harness) currentLeader(ctx context.Context) (*Worker, error) {
	for {
		h.mu.Lock()
		w, ok := h.target()
		h.mu.Unlock()
		if ok {
			return w, nil
		}
		select {
		case <-h.changed:
		case <-ctx.Done():
			return nil, errors.New("no settled leader: " + ctx.Err().Error())
		}
	}
}

// target returns the worker faults aim at, if every daemon is settled
// (see currentLeader).
func (h *Harness) target() (*Worker, bool) {
	load := map[string]int{}
	for _, w := range h.workers {
		if h.cfg.Fleet && !w.joined {
			return nil, false
		}
		load[w.name] = 0
	}
	for _, d := range h.cfg.DaemonNames() {
		holder, held := h.holders[d]
		if !held || !h.settled[d] || h.workers[holder] == nil {
			return nil, false
		}
		load[holder]++
	}
	var busiest *Worker
	for name, n := range load {
		if w := h.workers[name]; busiest == nil || n > load[busiest.name] || n == load[busiest.name] && name < busiest.name {
			busiest = w
		}
	}
	return busiest, busiest != nil && check.Spread(load) <= 1
}

// drainWins forgets the wins seen so far.
func (h *Harness) drainWins() {
	for {
		select {
		case <-h.wins:
		default:
			return
		}
	}
}

// nextWin waits for a win after the fault, until ctx is done.
func (h *Harness) nextWin(ctx context.Context) (record.Event, bool) {
	select {
	case ev := <-h.wins:
		return ev, true
	case <-ctx.Done():
		return record.Event{}, false
	}
}

// Candidate returns a worker that does not lead.
func (h *Harness) Candidate(leader *Worker) *Worker {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.workers {
		if w != leader {
			return w
		}
	}
	return nil
}

// Kill SIGKILLs a worker, waits for it, and starts a replacement.
func (h *Harness) Kill(w *Worker) error {
	h.retire(w, "kill", syscall.SIGKILL)
	<-w.done
	return h.SpawnWorker()
}

// Stop asks a worker to stop (SIGTERM), waits until another worker leads,
// then lets it exit and starts a replacement. Neither its exit nor a new
// process starting may compete with the handover for the CPUs: on separate
// machines they would not.
func (h *Harness) Stop(w *Worker) error {
	h.retire(w, "stop", syscall.SIGTERM)
	if h.Candidate(nil) != nil { // another worker is left to take over
		wait, cancel := context.WithTimeout(context.Background(), leaderTimeout(h.cfg))
		h.nextWin(wait)
		cancel()
	}
	h.awaitExit(w)
	return h.SpawnWorker()
}

// retire takes a worker out of the run, expecting its exit, and signals it.
func (h *Harness) retire(w *Worker, kind string, sig syscall.Signal) {
	h.mu.Lock()
	w.expected = true
	delete(h.workers, w.name)
	h.mu.Unlock()
	h.rec.Record(record.Event{Kind: kind, Target: w.name, PID: w.cmd.Process.Pid})
	w.cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot act on SIGTERM
	w.cmd.Process.Signal(sig)
}

// awaitExit lets a retired worker exit and waits for it. One still running
// after worker.StartTimeout is recorded as hung and killed.
func (h *Harness) awaitExit(w *Worker) {
	if w.hold != nil {
		w.hold.Close()
	}
	select {
	case <-w.done:
	case <-time.After(worker.StartTimeout):
		h.rec.Record(record.Event{Kind: "crash", Target: w.name, Cause: "hung on SIGTERM"})
		w.cmd.Process.Kill()
		<-w.done
	}
}

// Pause stops a worker with SIGSTOP for d, then continues it.
func (h *Harness) Pause(w *Worker, d time.Duration) {
	h.rec.Record(record.Event{Kind: "pause", Target: w.name, PID: w.cmd.Process.Pid})
	w.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	w.cmd.Process.Signal(syscall.SIGCONT)
	h.rec.Record(record.Event{Kind: "resume", Target: w.name, PID: w.cmd.Process.Pid})
}

// stopAll stops the workers gracefully, all at once, and waits for them.
func (h *Harness) stopAll(ws []*Worker) {
	for _, w := range ws {
		h.retire(w, "stop", syscall.SIGTERM)
	}
	for _, w := range ws {
		h.awaitExit(w)
	}
}

// Shutdown stops every worker gracefully, then in an -agents run waits for
// the actors to go (and kills those left over), then stops the servers.
func (h *Harness) Shutdown() {
	h.rec.Record(record.Event{Kind: "shutdown"})
	h.mu.Lock()
	var ws []*Worker
	for _, w := range h.workers {
		ws = append(ws, w)
	}
	h.mu.Unlock()
	h.stopAll(ws)
	h.endAgents()
	if h.admin != nil {
		h.recordLastRevision()
	}
	if h.cfg.Cluster {
		h.checkReplicas()
	}
	if h.admin != nil {
		h.dumpFence()
		if !h.cfg.Fleet { // fleet nodes record no leadership history
			h.dumpLeadership()
		}
		h.audit.stop()
		h.admin.Close()
	}
	for _, sp := range h.servers {
		sp.Stop()
	}
	if h.topo != nil {
		h.topo.Close()
	}
	h.rec.Record(record.Event{Kind: "end"})
}

// Name returns the worker's name (w0, w1, …).
func (w *Worker) Name() string { return w.name }

// Proxies returns the proxies between the worker and its servers, one per
// server.
func (w *Worker) Proxies() []*faultproxy.Proxy { return w.proxies }

// Record records ev in the harness's own history.
func (h *Harness) Record(ev record.Event) { h.rec.Record(ev) }

// KV returns the election bucket, through the harness's own connection,
// every write recorded.
func (h *Harness) KV() jetstream.KeyValue { return h.kv }

// Servers returns the run's servers, in the topology's order.
func (h *Harness) Servers() []*topology.Process { return h.servers }

// Topology returns the run's servers and the proxies on the links between
// them.
func (h *Harness) Topology() *topology.Topology { return h.topo }
