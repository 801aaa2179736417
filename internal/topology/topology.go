// Package topology starts every multi-server NATS topology that the tests
// (testenv.Cluster among them), the end-to-end tests and the chaos harness
// run: a cluster, a supercluster (clusters joined by gateways) and a hub with
// a leaf node, on loopback ports.
//
// A builder (Single, Cluster, Supercluster, Leaf) chooses the ports and
// describes every server as a Server, which a caller starts in this process
// (Server.StartEmbedded), in a child process running this executable
// (Process with Self: the executable calls ServeIfAsked first thing) or as a
// standalone nats-server with a configuration file (Process with Binary).
// AwaitFormed then waits until the servers work together.
//
// Unless Options.Direct is set, every link between two servers (a gateway,
// a leaf node link, and with Options.ProxyRoutes a route) runs through a
// faultproxy.Proxy of its own, one per pair of servers and direction, and
// every server gossips a dead address for its gateway and proxied routes,
// so that no connection goes around a proxy: IsolateRegion and
// IsolateServer cut links, Each delays them, Heal mends them.
package topology

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/faultproxy"
)

// deadAddress is the route and gateway address proxied servers gossip:
// nothing listens there, so a server reaches a peer only through its proxy
// (an attempt at the gossiped address fails at once, and the next attempt
// goes through the proxy).
const deadAddress = "127.0.0.1:1"

// Kind is what a link joins.
type Kind int

// The kinds of link.
const (
	Route    Kind = iota // two servers of one cluster
	Gateway              // two regions of a supercluster
	LeafLink             // a leaf node server to its hub
)

// Link is the proxy one server dials another through.
type Link struct {
	Kind     Kind
	From, To *Server // From dials To
	Proxy    *faultproxy.Proxy
}

// Topology is a set of servers and the proxies on the links between them.
// The servers are started by the caller; the proxies run from the builder
// on until Close.
type Topology struct {
	Servers []*Server
	Links   []*Link
}

// Options are what the builders take besides the shape.
type Options struct {
	// Dir holds the servers' stores, one directory each, named after the
	// server ("store-n1").
	Dir string
	// Direct links the servers straight to each other, without proxies, as
	// a user's configuration would.
	Direct bool
	// ProxyRoutes puts the routes between a cluster's servers behind
	// proxies too (not with Direct).
	ProxyRoutes bool
	// SyncAlways makes every server fsync each write before acknowledging
	// it.
	SyncAlways bool
}

// builder assigns the ports and proxies of a topology being built.
type builder struct {
	o     Options
	t     *Topology
	ports []int
}

func newBuilder(o Options, ports int) (*builder, error) {
	p, err := embedded.FreePorts(ports)
	if err != nil {
		return nil, err
	}
	return &builder{o: o, t: &Topology{}, ports: p}, nil
}

// port takes the next free port.
func (b *builder) port() int {
	p := b.ports[0]
	b.ports = b.ports[1:]
	return p
}

// server adds a server with client and monitoring ports.
func (b *builder) server(name, region string) *Server {
	s := &Server{Name: name, Region: region, StoreDir: filepath.Join(b.o.Dir, "store-"+name),
		ClientPort: b.port(), MonitorPort: b.port(), SyncAlways: b.o.SyncAlways}
	b.t.Servers = append(b.t.Servers, s)
	return s
}

// link returns the URL from dials to reach to's port, with scheme: the
// port itself with Direct, else a new proxy's.
func (b *builder) link(kind Kind, from, to *Server, port int, scheme string) (string, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if b.o.Direct {
		return scheme + "://" + addr, nil
	}
	p, err := faultproxy.New(addr)
	if err != nil {
		return "", err
	}
	if kind == Gateway {
		p.Admit(gatewayFrom(from.Region))
	}
	b.t.Links = append(b.t.Links, &Link{Kind: kind, From: from, To: to, Proxy: p})
	return strings.Replace(p.URL(), "nats://", scheme+"://", 1), nil
}

// gatewayFrom admits a gateway connection only from region's servers, by
// the gateway its CONNECT names. nats-server gossips to each gateway it
// accepts the URLs it dials for other regions, so without it a server
// would reach a region over another region's link, around a cut of its
// own: a region cut off could still send, one way.
func gatewayFrom(region string) func(first []byte) bool {
	return func(first []byte) bool {
		const field = `"gateway":"`
		i := bytes.Index(first, []byte(field))
		return i < 0 || bytes.HasPrefix(first[i+len(field):], []byte(region+`"`))
	}
}

// cluster makes servers one cluster, each routed to every other (a cluster
// of one routes to itself, which clustered JetStream requires).
func (b *builder) cluster(name string, servers []*Server) error {
	for _, s := range servers {
		s.Cluster, s.ClusterPort = name, b.port()
	}
	proxied := b.o.ProxyRoutes && !b.o.Direct
	for _, s := range servers {
		for _, peer := range servers {
			var u string
			var err error
			switch {
			case peer == s || !proxied:
				u = fmt.Sprintf("nats-route://127.0.0.1:%d", peer.ClusterPort)
			default:
				u, err = b.link(Route, s, peer, peer.ClusterPort, "nats-route")
			}
			if err != nil {
				return err
			}
			s.Routes = append(s.Routes, u)
		}
		if proxied {
			s.ClusterAdvertise = deadAddress
		}
	}
	return nil
}

// build returns the topology, or closes its proxies if err is not nil.
func (b *builder) build(err error) (*Topology, error) {
	if err != nil {
		b.t.Close()
		return nil, err
	}
	return b.t, nil
}

// Single is one server, n1, of a cluster of its own.
func Single(o Options) (*Topology, error) {
	b, err := newBuilder(o, 2)
	if err != nil {
		return nil, err
	}
	b.server("n1", "")
	return b.build(nil)
}

// Cluster is n servers, n1 to nN, of the cluster name.
func Cluster(name string, n int, o Options) (*Topology, error) {
	b, err := newBuilder(o, 3*n)
	if err != nil {
		return nil, err
	}
	var servers []*Server
	for i := range n {
		servers = append(servers, b.server(fmt.Sprintf("n%d", i+1), ""))
	}
	return b.build(b.cluster(name, servers))
}

// Supercluster is one cluster per size given, regions C1, C2, …, of that
// many servers each (C1-S1, C1-S2 …), joined by gateways: every server
// reaches every other region's servers, each through a link of its own.
func Supercluster(sizes []int, o Options) (*Topology, error) {
	total := 0
	for _, n := range sizes {
		total += n
	}
	b, err := newBuilder(o, 4*total)
	if err != nil {
		return nil, err
	}
	regions := map[string][]*Server{}
	for i, n := range sizes {
		region := fmt.Sprintf("C%d", i+1)
		for j := range n {
			s := b.server(fmt.Sprintf("%s-S%d", region, j+1), region)
			s.GatewayPort = b.port()
			if !o.Direct {
				s.GatewayAdvertise = deadAddress
			}
			regions[region] = append(regions[region], s)
		}
		if err := b.cluster(region, regions[region]); err != nil {
			return b.build(err)
		}
	}
	for _, s := range b.t.Servers {
		s.Gateways = map[string][]string{}
		for _, peer := range b.t.Servers {
			if peer.Region == s.Region {
				continue
			}
			u, err := b.link(Gateway, s, peer, peer.GatewayPort, "nats")
			if err != nil {
				return b.build(err)
			}
			s.Gateways[peer.Region] = append(s.Gateways[peer.Region], u)
		}
	}
	return b.build(nil)
}

// Leaf is a hub server (region and JetStream domain "hub") and a leaf node
// server (region and domain "leaf") that links to it.
func Leaf(o Options) (*Topology, error) {
	b, err := newBuilder(o, 5)
	if err != nil {
		return nil, err
	}
	hub := b.server("hub", "hub")
	hub.Domain, hub.LeafPort = "hub", b.port()
	leaf := b.server("leaf", "leaf")
	leaf.Domain = "leaf"
	leaf.LeafRemote, err = b.link(LeafLink, leaf, hub, hub.LeafPort, "nats-leaf")
	return b.build(err)
}

// Server returns the server named name, nil if there is none.
func (t *Topology) Server(name string) *Server {
	for _, s := range t.Servers {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Regions returns the regions of the servers, in order of their first
// server.
func (t *Topology) Regions() []string {
	var regions []string
	for _, s := range t.Servers {
		if !slices.Contains(regions, s.Region) {
			regions = append(regions, s.Region)
		}
	}
	return regions
}

// ClientURLs returns the client URLs of region's servers, comma separated,
// as nats.Connect takes them.
func (t *Topology) ClientURLs(region string) string {
	var urls []string
	for _, s := range t.Servers {
		if s.Region == region {
			urls = append(urls, s.ClientURL())
		}
	}
	return strings.Join(urls, ",")
}

// IsolateRegion applies fault to every gateway and leaf node link from or
// to region's servers: the region cut off from the others.
func (t *Topology) IsolateRegion(region string, fault func(*faultproxy.Proxy)) {
	t.each(func(l *Link) bool {
		return l.Kind != Route && (l.From.Region == region || l.To.Region == region)
	}, fault)
}

// IsolateServer applies fault to every route from or to the server named
// name: the server cut off from its cluster's other servers.
func (t *Topology) IsolateServer(name string, fault func(*faultproxy.Proxy)) {
	t.each(func(l *Link) bool {
		return l.Kind == Route && (l.From.Name == name || l.To.Name == name)
	}, fault)
}

// Each applies fault to every link.
func (t *Topology) Each(fault func(*faultproxy.Proxy)) {
	t.each(func(*Link) bool { return true }, fault)
}

// Heal ends every link's fault.
func (t *Topology) Heal() { t.Each((*faultproxy.Proxy).Heal) }

// Close closes every proxy: call it once the servers have stopped.
func (t *Topology) Close() { t.Each((*faultproxy.Proxy).Close) }

func (t *Topology) each(match func(*Link) bool, fault func(*faultproxy.Proxy)) {
	for _, l := range t.Links {
		if match(l) {
			fault(l.Proxy)
		}
	}
}

// sortedKeys returns m's keys in order, so that a configuration reads the
// same every time.
func sortedKeys(m map[string][]string) []string { return slices.Sorted(maps.Keys(m)) }
