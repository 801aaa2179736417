package integration

import (
	"context"
	"flag"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/kvelect/election/internal/topology"
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

// cutMode is how a region's links are cut.
type cutMode int

const (
	// linkHeld holds every byte, silently, until healed, then delivers them,
	// as TCP retransmission would: a blackhole that only a ping timeout
	// notices.
	linkHeld cutMode = iota
	// linkRefused resets the links' connections and every new one at once:
	// a loud cut, noticed at once.
	linkRefused
)

func (m cutMode) String() string { return [...]string{"blackhole", "loud"}[m] }

// fault is what the links' proxies do in mode m.
func (m cutMode) fault() func(*faultproxy.Proxy) {
	return [...]func(*faultproxy.Proxy){(*faultproxy.Proxy).Blackhole, (*faultproxy.Proxy).Refuse}[m]
}

// formTimeout bounds how long a topology may take to form, or to form
// again once healed: on a busy machine a supercluster once took over 30 s.
const formTimeout = 60 * time.Second

// supercluster is a supercluster of the topology kit (regions C1, C2, …),
// its servers in this process but for those in child processes.
type supercluster struct {
	*topology.Topology
	procs map[string]*topology.Process // in child processes, by server name
}

// startSupercluster starts one cluster per size given, of that many servers,
// and returns once it has formed (topology.Topology.Formed). The servers
// named in inChild run in child processes, so that a test can kill them
// outright (an in-process Shutdown hands its raft leaderships over first).
func startSupercluster(t *testing.T, sizes []int, inChild ...string) *supercluster {
	t.Helper()
	topo, err := topology.Supercluster(sizes, topology.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sc := &supercluster{Topology: topo, procs: map[string]*topology.Process{}}
	// The proxies close after the servers have shut down (cleanups run last
	// first).
	t.Cleanup(topo.Close)
	var all []*server.Server
	t.Cleanup(func() { embedded.Shutdown(all...) })
	for _, s := range topo.Servers {
		if slices.Contains(inChild, s.Name) {
			p := topology.NewProcess(s, topology.Self(), os.Stderr)
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Kill)
			sc.procs[s.Name] = p
			continue
		}
		srv, err := s.StartEmbedded()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, srv)
	}
	if err := topo.AwaitFormed(context.Background(), formTimeout); err != nil {
		t.Fatal(err)
	}
	return sc
}

// setDelay delays every chunk on every gateway link by d, one way, each
// from when it was sent (a link's latency), until Heal.
func (sc *supercluster) setDelay(d time.Duration) {
	sc.Each(func(p *faultproxy.Proxy) { p.Latency(d) })
}

// connect opens a connection to region's servers only.
func (sc *supercluster) connect(t *testing.T, region string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return testenv.Connect(t, sc.ClientURLs(region))
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
	c1 := 0
	for _, s := range sc.Servers {
		if s.Region == "C1" {
			c1++
		}
	}
	return testenv.Bucket(t, js, jetstream.KeyValueConfig{
		Bucket: name, TTL: ttl, Replicas: min(c1, 3),
		Placement: &jetstream.Placement{Cluster: "C1"},
	})
}

// settle heals every fault and waits until the supercluster has formed
// again and a write from each region reaches bucket: a scenario after
// another starts from a whole supercluster.
func (sc *supercluster) settle(t *testing.T, bucket string) {
	t.Helper()
	sc.Heal()
	if err := sc.AwaitFormed(context.Background(), formTimeout); err != nil {
		t.Fatal(err)
	}
	for _, region := range sc.Regions() {
		kv := sc.kv(t, region, bucket)
		testenv.Eventually(t, "a write from "+region, 60*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := kv.Put(ctx, "settle", []byte(region))
			return err == nil
		})
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

// leafPair is the topology kit's hub (JetStream domain hub) and leaf node
// server (domain leaf), both in this process, linked through a proxy
// (regions "leaf" and "hub").
type leafPair struct {
	*topology.Topology
	hub, leaf *server.Server
}

// startLeafPair starts the pair; ping is the leaf server's ping interval
// (0: the server's default, 2 minutes).
func startLeafPair(t *testing.T, ping time.Duration) *leafPair {
	t.Helper()
	topo, err := topology.Leaf(topology.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(topo.Close)
	topo.Server("leaf").PingInterval = ping
	lp := &leafPair{Topology: topo}
	for _, s := range []struct {
		name string
		srv  **server.Server
	}{{"hub", &lp.hub}, {"leaf", &lp.leaf}} {
		srv, err := topo.Server(s.name).StartEmbedded()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { embedded.Shutdown(srv) })
		*s.srv = srv
	}
	if err := topo.AwaitFormed(context.Background(), formTimeout); err != nil {
		t.Fatal(err)
	}
	return lp
}
