package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The supercluster, leaf node and mirror tests (supercluster_test.go,
// leaf_test.go, mirror_test.go) run short forms by default: one server per
// cluster, a 2 s TTL, faults that last until the events they test have
// happened, few samples. -topologies.full runs the forms docs/topologies.md
// reports: three servers per cluster (R3 buckets), a 10 s TTL, cuts held for
// at least 40 s, so that gateways and leaf links notice them, and 200 samples
// per figure:
//
//	go test -v -count=1 -timeout 30m -run 'Supercluster|Leaf|Mirror' ./integration -topologies.full
var topologiesFull = flag.Bool("topologies.full", false, "supercluster, leaf node and mirror tests: run the full forms (3 servers per cluster, 10 s TTL, 40 s cuts, 200 samples); takes about 6 minutes")

// topoScale is what differs between the short and the full forms.
type topoScale struct {
	servers  int           // per cluster; the buckets have as many replicas
	ttl      time.Duration // election buckets' TTL
	minCut   time.Duration // a cut lasts at least this long
	samples  int           // per figure
	fastPing time.Duration // the leaf's short ping interval
}

func scale() topoScale {
	if *topologiesFull {
		return topoScale{servers: 3, ttl: 10 * time.Second, minCut: 40 * time.Second, samples: 200, fastPing: 10 * time.Second}
	}
	return topoScale{servers: 1, ttl: ttl, samples: 25, fastPing: time.Second}
}

// figure logs a measured figure, for docs/topologies.md: run with -v and
// grep "figure:".
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("figure: %s: "+format, append([]any{t.Name()}, args...)...)
}

// cutMode is how a link is cut.
type cutMode int

const (
	linkOpen cutMode = iota
	// linkHeld holds every byte, silently, until healed, then delivers them,
	// as TCP retransmission would: a blackhole that only a ping timeout
	// notices.
	linkHeld
	// linkRefused closes the link's connections and every new one at once:
	// a loud cut, noticed at once.
	linkRefused
)

func (m cutMode) String() string { return [...]string{"open", "blackhole", "loud"}[m] }

// link is a connection between two regions: from is the side that dialled,
// to the side whose listener it reached.
type link struct{ from, to string }

// netem is the fault state of a topology's links, shared by its proxies:
// regions cut off, and a one-way delay on every link.
type netem struct {
	mu      sync.Mutex
	cut     map[string]cutMode // by region: every link touching it
	delay   time.Duration      // one way, every link
	changed chan struct{}      // closed and replaced by every change
	conns   map[*linkConn]struct{}
}

func newNetem() *netem {
	return &netem{cut: map[string]cutMode{}, changed: make(chan struct{}), conns: map[*linkConn]struct{}{}}
}

// isolate cuts every link of region, as mode says.
func (n *netem) isolate(region string, mode cutMode) {
	n.mu.Lock()
	n.cut[region] = mode
	var refused []*linkConn
	for c := range n.conns {
		if n.modeLocked(c.link) == linkRefused {
			refused = append(refused, c)
		}
	}
	n.changedLocked()
	n.mu.Unlock()
	for _, c := range refused {
		c.close()
	}
}

// setDelay delays every chunk on every link by d, one way.
func (n *netem) setDelay(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = d
	n.changedLocked()
}

// heal ends every cut and the delay; held bytes are delivered.
func (n *netem) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
	n.delay = 0
	n.changedLocked()
}

func (n *netem) changedLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

func (n *netem) modeLocked(l link) cutMode {
	if l == (link{}) {
		return linkOpen // not yet known: the listener's INFO before the dialler's CONNECT
	}
	return max(n.cut[l.from], n.cut[l.to])
}

// state returns how l is cut, the delay on it, and a channel closed by the
// next change.
func (n *netem) state(l link) (cutMode, time.Duration, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.delay
	if l == (link{}) {
		d = 0
	}
	return n.modeLocked(l), d, n.changed
}

// register adds c, now that its link is known, and reports whether it may
// carry anything.
func (n *netem) register(c *linkConn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.modeLocked(c.link) == linkRefused {
		return false
	}
	n.conns[c] = struct{}{}
	return true
}

func (n *netem) unregister(c *linkConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.conns, c)
}

// linkProxy stands in front of one server's gateway or leaf node listener,
// so that every connection to that server, from any region, crosses it. It
// names each connection's link by the region the dialler's CONNECT names
// (a gateway's "gateway" field) or, without one, by dialler (a leaf).
type linkProxy struct {
	ln       net.Listener
	target   string
	to       string
	dialler  string
	net      *netem
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[*linkConn]struct{}
	closed   bool
	untagged int // connections whose first line was not a CONNECT
}

// linkConn is one proxied connection: the dialler's side and the server's.
type linkConn struct {
	dialler, server net.Conn
	link            link
	once            sync.Once
	done            chan struct{}
}

func (c *linkConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.dialler.Close()
		c.server.Close()
	})
}

func newLinkProxy(n *netem, target, to, dialler string) (*linkProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &linkProxy{ln: ln, target: target, to: to, dialler: dialler, net: n, conns: map[*linkConn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// addr is the proxy's host:port.
func (p *linkProxy) addr() string { return p.ln.Addr().String() }

// close stops accepting, closes every connection and waits for the proxy's
// goroutines.
func (p *linkProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *linkProxy) accept() {
	for {
		d, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			d.Close()
			continue
		}
		c := &linkConn{dialler: d, server: s, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve forwards c both ways until either side ends. The listener speaks
// first (INFO); the dialler's first line, its CONNECT, names the link, and
// from then on the link's faults apply to both directions.
func (p *linkProxy) serve(c *linkConn) {
	linked := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		c.close()
		wg.Wait()
		p.net.unregister(c)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	wg.Go(func() { p.forward(c, c.dialler, c.server, nil, linked) })
	r := bufio.NewReader(c.dialler)
	line, err := r.ReadSlice('\n')
	if err != nil {
		return
	}
	c.link = link{from: p.dialler, to: p.to}
	if gw, ok := connectGateway(line); ok && gw != "" {
		c.link.from = gw
	} else if !ok {
		p.mu.Lock()
		p.untagged++
		p.mu.Unlock()
	}
	if !p.net.register(c) {
		return
	}
	close(linked)
	first := append([]byte(nil), line...)
	if n := r.Buffered(); n > 0 {
		rest, _ := r.Peek(n)
		first = append(first, rest...)
	}
	p.forward(c, c.server, c.dialler, first, nil)
}

// connectGateway returns the "gateway" field of a CONNECT line, and whether
// the line is a CONNECT.
func connectGateway(line []byte) (string, bool) {
	arg, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "CONNECT ")
	if !ok {
		return "", false
	}
	var connect struct {
		Gateway string `json:"gateway"`
	}
	if err := json.Unmarshal([]byte(arg), &connect); err != nil {
		return "", false
	}
	return connect.Gateway, true
}

// chunk is bytes read from one side, due on the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// forward copies src to dst, first sending first, each chunk delayed by the
// link's delay when it was read and held while the link is held; a refused
// link closes c. A reader and a writer run apart, so that a delay delays
// each chunk without queueing the next one behind it. With a non-nil
// linked, faults apply only once it is closed.
func (p *linkProxy) forward(c *linkConn, dst, src net.Conn, first []byte, linked <-chan struct{}) {
	isLinked := func() bool {
		if linked == nil {
			return true
		}
		select {
		case <-linked:
			return true
		default:
			return false
		}
	}
	chunks := make(chan chunk, 256)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(chunks)
		send := func(b []byte) bool {
			var d time.Duration
			if isLinked() {
				_, d, _ = p.net.state(c.link)
			}
			select {
			case chunks <- chunk{b: b, due: time.Now().Add(d)}:
				return true
			case <-c.done:
				return false
			}
		}
		if len(first) > 0 && !send(first) {
			return
		}
		buf := make([]byte, 32*1024)
		for {
			n, err := src.Read(buf)
			if n > 0 && !send(append([]byte(nil), buf[:n]...)) {
				return
			}
			if err != nil {
				return
			}
		}
	})
	defer wg.Wait()
	defer c.close()
	for ch := range chunks {
		if isLinked() && !p.await(c, ch.due) {
			return
		}
		if _, err := dst.Write(ch.b); err != nil {
			return
		}
	}
}

// await waits until c's link lets a chunk due at due through, and reports
// false if the link was refused or c closed meanwhile.
func (p *linkProxy) await(c *linkConn, due time.Time) bool {
	for {
		mode, _, changed := p.net.state(c.link)
		switch mode {
		case linkRefused:
			return false
		case linkHeld:
			select {
			case <-changed:
				continue
			case <-c.done:
				return false
			}
		}
		wait := time.Until(due)
		if wait <= 0 {
			return true
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-changed:
		case <-c.done:
			timer.Stop()
			return false
		}
		timer.Stop()
	}
}

// supercluster is a set of clusters joined by gateways, each cluster a
// region named C1, C2, … Every gateway listener has a linkProxy in front of
// it, and every server advertises its proxy's address as its gateway URL:
// gossip then only ever spreads proxy addresses, so no gateway connection
// can go around a proxy.
type supercluster struct {
	regions []string
	servers map[string][]*server.Server // in this process, by region
	procs   map[string]*serverProcess   // in child processes, by server name
	clients map[string][]string         // client URLs, by region
	net     *netem
	proxies []*linkProxy
}

// member is what a server of a supercluster is started with, in this
// process or in a child process (as JSON).
type member struct {
	Name, Region string
	StoreDir     string
	ClientPort   int
	ClusterPort  int
	Routes       []string
	GatewayPort  int
	Advertise    string              // the address of the proxy in front of the gateway listener
	Gateways     map[string][]string // the other regions' gateway proxies, by region
}

// configure sets the server options m describes.
func (m member) configure(o *server.Options) {
	o.ServerName = m.Name
	o.Port = m.ClientPort
	// A cluster of one server still needs a route (to itself) for JetStream
	// to run clustered.
	o.Cluster = server.ClusterOpts{Name: m.Region, Host: "127.0.0.1", Port: m.ClusterPort}
	o.Routes = server.RoutesFromStr(strings.Join(m.Routes, ","))
	o.Gateway = server.GatewayOpts{Name: m.Region, Host: "127.0.0.1", Port: m.GatewayPort, Advertise: m.Advertise}
	for region, addrs := range m.Gateways {
		gw := &server.RemoteGatewayOpts{Name: region}
		for _, a := range addrs {
			gw.URLs = append(gw.URLs, &url.URL{Scheme: "nats", Host: a})
		}
		o.Gateway.Gateways = append(o.Gateway.Gateways, gw)
	}
}

// startSupercluster starts one cluster per size given, of that many servers,
// and returns once every server has its outbound gateways and the JetStream
// meta group has a leader with every server current. The servers named in
// inChild run in child processes, so that a test can kill them outright
// (an in-process Shutdown hands its raft leaderships over first).
func startSupercluster(t *testing.T, sizes []int, inChild ...string) *supercluster {
	t.Helper()
	server.SetGatewaysSolicitDelay(10 * time.Millisecond)
	sc := &supercluster{servers: map[string][]*server.Server{}, procs: map[string]*serverProcess{}, clients: map[string][]string{}, net: newNetem()}
	total := 0
	for _, n := range sizes {
		total += n
	}
	ports, err := embedded.FreePorts(3 * total)
	if err != nil {
		t.Fatal(err)
	}
	var members []*member
	for i, n := range sizes {
		region := fmt.Sprintf("C%d", i+1)
		sc.regions = append(sc.regions, region)
		for j := range n {
			m := &member{Name: fmt.Sprintf("%s-S%d", region, j+1), Region: region, StoreDir: t.TempDir(),
				ClientPort: ports[0], ClusterPort: ports[1], GatewayPort: ports[2]}
			ports = ports[3:]
			p, err := newLinkProxy(sc.net, fmt.Sprintf("127.0.0.1:%d", m.GatewayPort), region, "")
			if err != nil {
				t.Fatal(err)
			}
			sc.proxies = append(sc.proxies, p)
			m.Advertise = p.addr()
			members = append(members, m)
			sc.clients[region] = append(sc.clients[region], fmt.Sprintf("nats://127.0.0.1:%d", m.ClientPort))
		}
	}
	for _, m := range members {
		m.Gateways = map[string][]string{}
		for _, peer := range members {
			switch {
			case peer.Region == m.Region:
				m.Routes = append(m.Routes, fmt.Sprintf("nats-route://127.0.0.1:%d", peer.ClusterPort))
			default:
				m.Gateways[peer.Region] = append(m.Gateways[peer.Region], peer.Advertise)
			}
		}
	}
	// The proxies close after the servers have shut down (cleanups run last
	// first).
	t.Cleanup(func() {
		for _, p := range sc.proxies {
			p.close()
			if p.untagged > 0 {
				t.Errorf("%d gateway connections to %s began with something other than a CONNECT: their faults went unapplied", p.untagged, p.to)
			}
		}
	})
	var all []*server.Server
	t.Cleanup(func() { embedded.Shutdown(all...) })
	for _, m := range members {
		if slices.Contains(inChild, m.Name) {
			sc.procs[m.Name] = startServerProcess(t, *m)
			continue
		}
		s, err := embedded.Configured(m.StoreDir, m.configure)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, s)
		sc.servers[m.Region] = append(sc.servers[m.Region], s)
	}
	testenv.Eventually(t, "the supercluster's gateways and JetStream meta group", 60*time.Second, func() bool {
		return formed(all, len(sizes), total)
	})
	return sc
}

// formed reports whether every server of servers (this process's, of a
// supercluster of regions regions and total servers) has its outbound
// gateways and is current, and all know the same meta leader with total
// peers.
func formed(servers []*server.Server, regions, total int) bool {
	leader := ""
	for _, s := range servers {
		if s.NumOutboundGateways() != regions-1 || !s.JetStreamIsCurrent() {
			return false
		}
		info, err := s.Jsz(nil)
		if err != nil || info.Meta == nil || info.Meta.Size != total || info.Meta.Leader == "" || leader != "" && info.Meta.Leader != leader {
			return false
		}
		leader = info.Meta.Leader
	}
	return true
}

// urls returns the client URLs of region's servers.
func (sc *supercluster) urls(region string) string { return strings.Join(sc.clients[region], ",") }

// serverProcess is a server of a topology running in a child process: this
// test binary, run again with the member's options in serverProcessEnv.
type serverProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser // held open: the child ends when it closes
	done  chan struct{}
}

// serverProcessEnv holds, for a child process, the JSON of the member it
// runs.
const serverProcessEnv = "KVELECT_TOPOLOGY_SERVER"

// startServerProcess starts m in a child process and waits until it takes
// clients; it is killed when the test ends, if not before.
func startServerProcess(t *testing.T, m member) *serverProcess {
	t.Helper()
	spec, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serverProcessEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe() // closed when this process ends: the child then ends too
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serverProcess{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ready <- sc.Scan() && sc.Text() == "ready"
		io.Copy(io.Discard, out)
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("server %s exited before it took clients", m.Name)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("server %s took no clients within a minute", m.Name)
	}
	return p
}

// kill SIGKILLs the process and waits for it to end.
func (p *serverProcess) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.stdin.Close()
}

// runServerProcessIfAsked runs the server a parent process asked for in
// serverProcessEnv, if any, until its standard input closes (the parent
// ended) or it is killed, and exits; without it, it returns at once. Call it
// first in TestMain.
func runServerProcessIfAsked() {
	spec := os.Getenv(serverProcessEnv)
	if spec == "" {
		return
	}
	var m member
	if err := json.Unmarshal([]byte(spec), &m); err != nil {
		fmt.Fprintln(os.Stderr, "server process:", err)
		os.Exit(2)
	}
	s, err := embedded.Configured(m.StoreDir, m.configure)
	if err != nil {
		fmt.Fprintln(os.Stderr, "server process:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	embedded.Shutdown(s)
	os.Exit(0)
}

// connect opens a connection to region's servers only.
func (sc *supercluster) connect(t *testing.T, region string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return testenv.Connect(t, sc.urls(region))
}

// kv opens a connection to region and binds it to bucket.
func (sc *supercluster) kv(t *testing.T, region, bucket string) jetstream.KeyValue {
	t.Helper()
	_, js := sc.connect(t, region)
	return bind(t, js, bucket)
}

// bind binds js to bucket, retrying while a fresh topology settles.
func bind(t *testing.T, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	t.Helper()
	return testenv.Poll(t, "binding bucket "+bucket, 30*time.Second, func() (jetstream.KeyValue, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, bucket)
		return kv, err == nil
	})
}

// homeBucket creates an election bucket placed in region C1, from a
// connection there, with one replica per C1 server (at most 3).
func (sc *supercluster) homeBucket(t *testing.T, name string, ttl time.Duration) jetstream.KeyValue {
	t.Helper()
	_, js := sc.connect(t, "C1")
	return testenv.Bucket(t, js, jetstream.KeyValueConfig{
		Bucket: name, TTL: ttl, Replicas: min(len(sc.clients["C1"]), 3),
		Placement: &jetstream.Placement{Cluster: "C1"},
	})
}

// leafPair is a hub server with JetStream domain "hub" and a leaf node
// server with JetStream domain "leaf", linked through a linkProxy (region
// names "leaf" and "hub") that the leaf cannot go around: it ignores the
// hub's other leaf URLs.
type leafPair struct {
	hub, leaf *server.Server
	net       *netem
}

// startLeafPair starts the pair; ping is the leaf server's ping interval
// (0: the server's default, 2 minutes).
func startLeafPair(t *testing.T, ping time.Duration) *leafPair {
	t.Helper()
	lp := &leafPair{net: newNetem()}
	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newLinkProxy(lp.net, fmt.Sprintf("127.0.0.1:%d", ports[0]), "hub", "leaf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	lp.hub = testenv.ConfiguredServer(t, func(o *server.Options) {
		o.ServerName, o.JetStreamDomain = "hub", "hub"
		o.LeafNode = server.LeafNodeOpts{Host: "127.0.0.1", Port: ports[0]}
	})
	lp.leaf = testenv.ConfiguredServer(t, func(o *server.Options) {
		o.ServerName, o.JetStreamDomain = "leaf", "leaf"
		o.PingInterval = ping
		o.LeafNode = server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{
			URLs:                    []*url.URL{{Scheme: "nats-leaf", Host: p.addr()}},
			IgnoreDiscoveredServers: true,
		}}}
	})
	testenv.Eventually(t, "the leaf node linked to the hub", 30*time.Second, func() bool {
		return lp.hub.NumLeafNodes() == 1 && lp.leaf.NumLeafNodes() == 1
	})
	return lp
}

// renewRecord records every election's acknowledged writes that events report,
// by candidate name, for tests to await them and to know when a leader's
// validity started.
type renewRecord struct {
	mu      sync.Mutex
	byName  map[string][]renewAt
	changed chan struct{}
}

// renewAt is an acknowledged renewal: sent at sent, acknowledged at acked.
type renewAt struct {
	sent, acked time.Time
}

func newRenewRecord() *renewRecord {
	return &renewRecord{byName: map[string][]renewAt{}, changed: make(chan struct{})}
}

// hook is the option that feeds the record.
func (r *renewRecord) hook() election.Option {
	return election.WithEventHook(func(e election.Event) {
		if e.Kind != election.EventRenewed || e.Err != nil {
			return
		}
		now := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		r.byName[e.Name] = append(r.byName[e.Name], renewAt{sent: now.Add(-e.Duration), acked: now})
		close(r.changed)
		r.changed = make(chan struct{})
	})
}

// await returns the first renewal by name acknowledged after after.
func (r *renewRecord) await(t *testing.T, name string, after time.Time) renewAt {
	t.Helper()
	timeout := time.After(awaitTimeout)
	for {
		r.mu.Lock()
		changed := r.changed
		for _, rn := range r.byName[name] {
			if rn.acked.After(after) {
				r.mu.Unlock()
				return rn
			}
		}
		r.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no renewal by %s after %v within %v", name, after.Format(time.StampMilli), awaitTimeout)
		}
	}
}

// since returns name's first renewal acknowledged after after, without
// waiting for one.
func (r *renewRecord) since(name string, after time.Time) (renewAt, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rn := range r.byName[name] {
		if rn.acked.After(after) {
			return rn, true
		}
	}
	return renewAt{}, false
}

// last returns name's latest acknowledged renewal sent before before.
func (r *renewRecord) last(name string, before time.Time) (renewAt, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last renewAt
	found := false
	for _, rn := range r.byName[name] {
		if rn.sent.Before(before) {
			last, found = rn, true
		}
	}
	return last, found
}

// rtts returns the round trips of name's renewals.
func (r *renewRecord) rtts(name string) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []time.Duration
	for _, rn := range r.byName[name] {
		d = append(d, rn.acked.Sub(rn.sent))
	}
	return d
}

// probe writes one key of a bucket at a steady pace, each write with a
// timeout, and keeps how each ended: what a region's clients see of a
// fault.
type probe struct {
	mu      sync.Mutex
	results []probeResult
	cancel  context.CancelFunc
	done    chan struct{}
}

type probeResult struct {
	at    time.Time // when the write was sent
	took  time.Duration
	class string
}

// startProbe puts key through kv every period, each with timeout, until
// stop.
func startProbe(kv jetstream.KeyValue, key string, period, timeout time.Duration) *probe {
	ctx, cancel := context.WithCancel(context.Background())
	p := &probe{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			start := time.Now()
			wctx, wcancel := context.WithTimeout(ctx, timeout)
			_, err := kv.Put(wctx, key, []byte(start.Format(time.RFC3339Nano)))
			wcancel()
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.results = append(p.results, probeResult{at: start, took: time.Since(start), class: errClass(err)})
			p.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// stop ends the probe and returns its results.
func (p *probe) stop() []probeResult {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.results)
}

// first returns the first result since since of class, and whether there is one.
func (p *probe) first(class string, since time.Time) (probeResult, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.results {
		if r.class == class && !r.at.Before(since) {
			return r, true
		}
	}
	return probeResult{}, false
}

// errClass names how a KV call ended, the way docs/topologies.md groups
// failures.
func errClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return "no responders"
	default:
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			return fmt.Sprintf("error %d", apiErr.ErrorCode)
		}
		return err.Error()
	}
}

// runs summarises the probe results sent from since until until as runs of
// one class: "ok ×4 (1.0s), timeout ×3 (6.0s)", each with the time from its
// first write to the next run's.
func runs(results []probeResult, since, until time.Time) string {
	var parts []string
	var class string
	var count int
	var start time.Time
	flush := func(end time.Time) {
		if count > 0 {
			parts = append(parts, fmt.Sprintf("%s ×%d (%v)", class, count, end.Sub(start).Round(100*time.Millisecond)))
		}
	}
	var last time.Time
	for _, r := range results {
		if r.at.Before(since) || !r.at.Before(until) {
			continue
		}
		if r.class != class {
			flush(r.at)
			class, count, start = r.class, 0, r.at
		}
		count++
		last = r.at.Add(r.took)
	}
	flush(last)
	if len(parts) == 0 {
		return "no writes"
	}
	return strings.Join(parts, ", ")
}

// percentiles returns the median and the 99th percentile of d.
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[(len(s)*99+99)/100-1]
}

// ms formats d in milliseconds with one decimal.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// watchResume writes key from writer every few milliseconds from now on,
// and returns how long w, a watcher of key in another region, took to
// deliver a value written after now: how long after a heal a watcher
// resumes.
func watchResume(t *testing.T, writer jetstream.KeyValue, w jetstream.KeyWatcher, key string) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			wctx, wcancel := context.WithTimeout(ctx, time.Second)
			_, _ = writer.Put(wctx, key, fmt.Appendf(nil, "after %d", i))
			wcancel()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	awaitUpdate(t, w, "a value written after the heal", func(e jetstream.KeyValueEntry) bool {
		return strings.HasPrefix(string(e.Value()), "after ")
	})
	return time.Since(start)
}

// drain returns the group's events not yet returned by await, without
// waiting for more.
func (g *group) drain() []event {
	evs := g.pending
	g.pending = nil
	for {
		select {
		case ev := <-g.events:
			evs = append(evs, ev)
		default:
			return evs
		}
	}
}

// startRegionGroup starts a group for key of bucket with one candidate per
// region, named after it and connected there alone: first starts alone and
// leads before the others start. Every candidate reports its renewals to
// rec.
func startRegionGroup(t *testing.T, sc *supercluster, bucket, key string, rec *renewRecord, first string, others ...string) *group {
	t.Helper()
	g := newGroup(t, key)
	g.add(first, sc.kv(t, first, bucket), rec.hook())
	if ev := g.awaitWin(); ev.name != first {
		t.Fatalf("%s won, want %s, the only candidate", ev.name, first)
	}
	for _, region := range others {
		g.add(region, sc.kv(t, region, bucket), rec.hook())
	}
	return g
}

// watchKey starts a watcher of key through kv, for updates only.
func watchKey(t *testing.T, kv jetstream.KeyValue, key string) jetstream.KeyWatcher {
	t.Helper()
	// The watcher lives as long as the context it was made with.
	w, err := kv.Watch(context.Background(), key, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatalf("watching %s: %v", key, err)
	}
	t.Cleanup(func() { w.Stop() })
	return w
}

// validity is how long after sending its last acknowledged write a leader
// stands down, at the default campaign interval.
func validity(ttl time.Duration) time.Duration { return election.TimingFor(ttl, 0).Validity }

// holdCut keeps a fault in place until it has lasted at least d since
// start: the full forms hold cuts long enough for pings to notice them. It
// waits out a fault's length, not an event.
func holdCut(start time.Time, d time.Duration) {
	if wait := time.Until(start.Add(d)); wait > 0 {
		time.Sleep(wait)
	}
}

// settle heals every fault and waits until every gateway is back, the meta
// group has a leader with every server current, and a write from each
// region reaches bucket: a scenario after another starts from a whole
// supercluster.
func (sc *supercluster) settle(t *testing.T, bucket string) {
	t.Helper()
	sc.net.heal()
	var all []*server.Server
	total := len(sc.procs)
	for _, region := range sc.regions {
		all = append(all, sc.servers[region]...)
		total += len(sc.servers[region])
	}
	testenv.Eventually(t, "the supercluster whole again", 60*time.Second, func() bool {
		return formed(all, len(sc.regions), total)
	})
	for _, region := range sc.regions {
		kv := sc.kv(t, region, bucket)
		testenv.Eventually(t, "a write from "+region, 60*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := kv.Put(ctx, "settle", []byte(region))
			return err == nil
		})
	}
}

// renewRTTs times n revision-checked updates of a key of its own through
// each kv, the operation a renewal is, all regions at once.
func renewRTTs(t *testing.T, kvs map[string]jetstream.KeyValue, n int) map[string][]time.Duration {
	t.Helper()
	var mu sync.Mutex
	out := map[string][]time.Duration{}
	var wg sync.WaitGroup
	for region, kv := range kvs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
			defer cancel()
			key := "rtt-" + strings.ReplaceAll(region, " ", "-")
			rev, err := kv.Put(ctx, key, []byte("0"))
			if err != nil {
				t.Errorf("%s: %v", region, err)
				return
			}
			var d []time.Duration
			for i := range n {
				start := time.Now()
				rev, err = kv.Update(ctx, key, fmt.Appendf(nil, "%d", i), rev)
				if err != nil {
					t.Errorf("%s: update %d: %v", region, i, err)
					return
				}
				d = append(d, time.Since(start))
			}
			mu.Lock()
			out[region] = d
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// watchLatencies writes n values of key through writer, 20 ms apart, and
// returns, for each watcher, how long after each write was sent it
// delivered it. A watcher may skip a value replaced before the server sent
// it (the bucket keeps one per key), so each watcher is read until it
// delivers the last value.
func watchLatencies(t *testing.T, writer jetstream.KeyValue, watchers map[string]jetstream.KeyValue, key string, n int) map[string][]time.Duration {
	t.Helper()
	type arrival struct {
		i  int
		at time.Time
	}
	arrivals := map[string][]arrival{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for region, kv := range watchers {
		w := watchKey(t, kv, key)
		wg.Go(func() {
			timeout := time.After(awaitTimeout)
			for {
				select {
				case e := <-w.Updates():
					at := time.Now()
					var i int
					if _, err := fmt.Sscanf(string(e.Value()), "%d", &i); err != nil || i < 0 || i >= n {
						t.Errorf("%s's watcher delivered %q", region, e.Value())
						return
					}
					mu.Lock()
					arrivals[region] = append(arrivals[region], arrival{i, at})
					mu.Unlock()
					if i == n-1 {
						return
					}
				case <-timeout:
					mu.Lock()
					got := len(arrivals[region])
					mu.Unlock()
					t.Errorf("%s's watcher delivered %d of %d writes, not the last, within %v", region, got, n, awaitTimeout)
					return
				}
			}
		})
	}
	sent := make([]time.Time, n)
	for i := range n {
		sent[i] = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := writer.Put(ctx, key, fmt.Appendf(nil, "%d", i))
		cancel()
		if err != nil {
			t.Errorf("writing %s: %v", key, err)
			break
		}
		time.Sleep(20 * time.Millisecond) // paces the writes; waits for nothing
	}
	wg.Wait()
	out := map[string][]time.Duration{}
	for region, as := range arrivals {
		for _, a := range as {
			out[region] = append(out[region], a.at.Sub(sent[a.i]))
		}
	}
	return out
}
