package fleet_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	scaleDaemons = flag.Int("fleet.daemons", 1000, "BenchmarkFleetScale: daemons")
	scaleNodes   = flag.Int("fleet.nodes", 20, "BenchmarkFleetScale: nodes")
	scaleTTL     = flag.Duration("fleet.ttl", 10*time.Second, "BenchmarkFleetScale: bucket TTL")
	burstNodes   = flag.Int("fleet.burst", 100, "BenchmarkFleetJoinBurst: nodes joining at once")
	moveCycles   = flag.Int("fleet.cycles", 20, "BenchmarkFleetMoves: leaves and crashes measured")
)

// counter counts the starts of daemons, and tells whether any daemon ever
// ran twice at once.
type counter struct {
	starts  atomic.Int64
	mu      sync.Mutex
	running map[string]string
	twice   []string
	started chan string // each start's daemon, if not nil
}

func newCounter() *counter { return &counter{running: map[string]string{}} }

func (c *counter) daemon(name, node string) fleet.Daemon {
	return fleet.Daemon{Name: name, Run: func(ctx context.Context) error {
		c.starts.Add(1)
		c.mu.Lock()
		if other, ok := c.running[name]; ok {
			c.twice = append(c.twice, fmt.Sprintf("%s on %s and %s", name, other, node))
		}
		c.running[name] = node
		started := c.started
		c.mu.Unlock()
		if started != nil {
			select {
			case started <- name:
			default: // the measurement waits for fewer
			}
		}
		<-ctx.Done()
		c.mu.Lock()
		if c.running[name] == node {
			delete(c.running, name)
		}
		c.mu.Unlock()
		return nil
	}}
}

func (c *counter) placed() (running int, spread int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	loads := map[string]int{}
	for _, n := range c.running {
		loads[n]++
	}
	if len(loads) == 0 {
		return 0, 0
	}
	l := slices.Collect(func(yield func(int) bool) {
		for _, v := range loads {
			yield(v)
		}
	})
	return len(c.running), slices.Max(l) - slices.Min(l)
}

// benchFleet joins nodes named names to the bucket, each on its own
// connection and Bucket, able to run every daemon, and returns them and
// their connections.
func benchFleet(b *testing.B, url, bucket string, c *counter, names []string, daemons []string) ([]*fleet.Node, []*nats.Conn) {
	b.Helper()
	nodes := make([]*fleet.Node, len(names))
	conns := make([]*nats.Conn, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			nc, js := testenv.Connect(b, url)
			conns[i] = nc
			kv, err := js.KeyValue(context.Background(), bucket)
			if err != nil {
				b.Error(err)
				return
			}
			eb, err := election.OpenBucket(context.Background(), kv)
			if err != nil {
				b.Error(err)
				return
			}
			b.Cleanup(eb.Close)
			cfg := fleet.Config{Name: name}
			for _, d := range daemons {
				cfg.Daemons = append(cfg.Daemons, c.daemon(d, name))
			}
			n, err := fleet.Join(context.Background(), eb, cfg)
			if err != nil {
				b.Error(err)
				return
			}
			nodes[i] = n
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return nodes, conns
}

func nodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("n%03d", i)
	}
	return out
}

// awaitSettled waits until every daemon runs, spread within one, and every
// node says it is balanced.
func awaitSettled(b *testing.B, c *counter, nodes []*fleet.Node, daemons int) {
	b.Helper()
	testenv.Eventually(b, "the fleet settled", 5*time.Minute, func() bool {
		running, spread := c.placed()
		if running != daemons || spread > 1 {
			return false
		}
		for _, n := range nodes {
			if !n.Balanced() {
				return false
			}
		}
		return true
	})
}

// BenchmarkFleetScale joins -fleet.nodes nodes at once, each able to run
// all -fleet.daemons daemons, in this process against one embedded server
// (file storage), and reports the time until every daemon runs and every
// node is balanced, heap and goroutines per daemon after that, KV writes per
// second over three campaign intervals of steady state, the consumers on the
// bucket's stream, and daemon starts beyond one per daemon (moves while
// settling). It fails if a daemon ever ran twice at once. Run it once:
//
//	go test -run '^$' -bench FleetScale -benchtime 1x ./fleet
func BenchmarkFleetScale(b *testing.B) {
	for b.Loop() {
		s := testenv.Server(b)
		_, js := testenv.Connect(b, s.ClientURL())
		testenv.Bucket(b, js, jetstream.KeyValueConfig{Bucket: "FLEETSCALE", TTL: *scaleTTL})
		heapBefore, goroutinesBefore := heapInUse(), runtime.NumGoroutine()
		c := newCounter()
		start := time.Now()
		nodes, _ := benchFleet(b, s.ClientURL(), "FLEETSCALE", c, nodeNames(*scaleNodes), names("d", *scaleDaemons))
		awaitSettled(b, c, nodes, *scaleDaemons)
		settled := time.Since(start)
		heapAfter, goroutinesAfter := heapInUse(), runtime.NumGoroutine()
		starts := c.starts.Load()

		window := 3 * *scaleTTL * 3 / 4
		seqBefore := lastSeq(b, js, "KV_FLEETSCALE")
		time.Sleep(window) // the steady state is what is measured
		writes := lastSeq(b, js, "KV_FLEETSCALE") - seqBefore

		b.ReportMetric(settled.Seconds(), "s-to-settled")
		b.ReportMetric(float64(heapAfter-heapBefore)/float64(*scaleDaemons), "heap-B/daemon")
		b.ReportMetric(float64(goroutinesAfter-goroutinesBefore)/float64(*scaleDaemons), "goroutines/daemon")
		b.ReportMetric(float64(writes)/window.Seconds(), "writes/s")
		b.ReportMetric(float64(consumers(b, js, "KV_FLEETSCALE"))/float64(*scaleNodes), "consumers/node")
		b.ReportMetric(float64(starts-int64(*scaleDaemons)), "extra-starts")
		b.ReportMetric(float64(c.starts.Load()-starts), "starts-in-window")
		c.finish(b, nodes)
	}
}

// BenchmarkFleetJoinBurst starts -fleet.burst nodes at once on a fleet of
// three times as many daemons, and reports the time to settle and the
// daemon starts beyond one per daemon: with everyone joining together, the
// daemons first go wherever they are claimed, and moves follow as the
// joins show.
//
//	go test -run '^$' -bench FleetJoinBurst -benchtime 1x ./fleet
func BenchmarkFleetJoinBurst(b *testing.B) {
	for b.Loop() {
		s := testenv.Server(b)
		_, js := testenv.Connect(b, s.ClientURL())
		testenv.Bucket(b, js, jetstream.KeyValueConfig{Bucket: "FLEETBURST", TTL: 10 * time.Second})
		c := newCounter()
		daemons := 3 * *burstNodes
		start := time.Now()
		nodes, _ := benchFleet(b, s.ClientURL(), "FLEETBURST", c, nodeNames(*burstNodes), names("d", daemons))
		awaitSettled(b, c, nodes, daemons)
		b.ReportMetric(time.Since(start).Seconds(), "s-to-settled")
		b.ReportMetric(float64(c.starts.Load()-int64(daemons)), "extra-starts")
		c.finish(b, nodes)
	}
}

// BenchmarkFleetMoves measures how fast a node's daemons run elsewhere:
// -fleet.cycles times, one of five nodes (20 daemons, TTL 2 s) leaves
// gracefully (daemons that return at once) and joins again; then as many
// times one is cut off (its connection closed) and a new node joins. It
// reports p50 and p99 of the time from Leave, or the cut, to the last of
// the node's daemons started elsewhere.
//
//	go test -run '^$' -bench FleetMoves -benchtime 1x ./fleet
func BenchmarkFleetMoves(b *testing.B) {
	for b.Loop() {
		s := testenv.Server(b)
		_, js := testenv.Connect(b, s.ClientURL())
		testenv.Bucket(b, js, jetstream.KeyValueConfig{Bucket: "FLEETMOVES", TTL: 2 * time.Second})
		f := &movingFleet{b: b, url: s.ClientURL(), c: newCounter(), daemons: names("d", 20), names: nodeNames(5)}
		f.nodes, f.conns = benchFleet(b, f.url, "FLEETMOVES", f.c, f.names, f.daemons)
		awaitSettled(b, f.c, f.nodes, len(f.daemons))
		leaves := f.cycles(func(i int) { f.nodes[i].Leave() }, func(i, _ int) {})
		crashes := f.cycles(func(i int) { f.conns[i].Close() }, func(i, cycle int) {
			f.nodes[i].Leave() // ends the cut-off node's goroutines; its keys aged out already
			f.names[i] = fmt.Sprintf("r%03d", cycle)
		})
		b.ReportMetric(percentile(leaves, 50).Seconds()*1000, "leave-p50-ms")
		b.ReportMetric(percentile(leaves, 99).Seconds()*1000, "leave-p99-ms")
		b.ReportMetric(percentile(crashes, 50).Seconds()*1000, "crash-p50-ms")
		b.ReportMetric(percentile(crashes, 99).Seconds()*1000, "crash-p99-ms")
		f.c.finish(b, f.nodes)
	}
}

// movingFleet is BenchmarkFleetMoves's fleet.
type movingFleet struct {
	b       *testing.B
	url     string
	c       *counter
	daemons []string
	names   []string
	nodes   []*fleet.Node
	conns   []*nats.Conn
}

// cycles takes out one node after another -fleet.cycles times with
// takeOut, measures the time until its daemons run elsewhere, then calls
// replace and joins a node under the name it leaves in f.names.
func (f *movingFleet) cycles(takeOut func(i int), replace func(i, cycle int)) []time.Duration {
	var took []time.Duration
	for cycle := range *moveCycles {
		i := cycle % len(f.nodes)
		mine := f.c.on(f.names[i])
		started := make(chan string, len(f.daemons))
		f.c.setStarted(started)
		begin := time.Now()
		takeOut(i)
		took = append(took, awaitStarts(f.b, started, mine).Sub(begin))
		f.c.setStarted(nil)
		replace(i, cycle)
		n, nc := benchFleet(f.b, f.url, "FLEETMOVES", f.c, f.names[i:i+1], f.daemons)
		f.nodes[i], f.conns[i] = n[0], nc[0]
		awaitSettled(f.b, f.c, f.nodes, len(f.daemons))
	}
	return took
}

// finish fails the benchmark if a daemon ever ran twice at once, and makes
// the nodes leave.
func (c *counter) finish(b *testing.B, nodes []*fleet.Node) {
	if len(c.twice) > 0 {
		b.Errorf("daemons ran twice at once: %v", c.twice)
	}
	for _, n := range nodes {
		n.Leave()
	}
}

// on returns the daemons running on node.
func (c *counter) on(node string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for d, n := range c.running {
		if n == node {
			out = append(out, d)
		}
	}
	return out
}

func (c *counter) setStarted(started chan string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started = started
}

// awaitStarts waits until every daemon of want has started again, and
// returns when the last did.
func awaitStarts(b *testing.B, started <-chan string, want []string) time.Time {
	b.Helper()
	missing := map[string]bool{}
	for _, d := range want {
		missing[d] = true
	}
	timeout := time.After(time.Minute)
	for len(missing) > 0 {
		select {
		case d := <-started:
			delete(missing, d)
		case <-timeout:
			b.Fatalf("daemons %v did not start again within a minute", missing)
		}
	}
	return time.Now()
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func streamInfo(b *testing.B, js jetstream.JetStream, stream string) *jetstream.StreamInfo {
	b.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		b.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return info
}

func lastSeq(b *testing.B, js jetstream.JetStream, stream string) uint64 {
	return streamInfo(b, js, stream).State.LastSeq
}

func consumers(b *testing.B, js jetstream.JetStream, stream string) int {
	return streamInfo(b, js, stream).State.Consumers
}

// percentile returns the p-th percentile of samples (nearest rank).
func percentile(samples []time.Duration, p float64) time.Duration {
	sorted := slices.Sorted(slices.Values(samples))
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
