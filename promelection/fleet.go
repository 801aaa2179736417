package promelection

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/prometheus/client_golang/prometheus"
)

// FleetCollector is a prometheus.Collector of one fleet node's series, as
// election agent --metrics serves them: this node's daemons and the fleet
// as this node sees it. Every series has the label node (this node's
// name); the daemons' also daemon.
//
//	kvelect_fleet_daemon_runs_here           gauge    1 while the daemon runs on this node, else 0
//	kvelect_fleet_daemon_starts_total        counter  times the daemon moved here (a new fencing token)
//	kvelect_fleet_daemon_restarts_total      counter  times it exited by itself here and was started again
//	kvelect_fleet_daemon_run_nowhere_seconds gauge    how long it has run on no node (Watch samples it)
//	kvelect_fleet_members                    gauge    the fleet's live members
//	kvelect_fleet_node_daemons               gauge    the daemons this node runs
//	kvelect_fleet_node_capacity              gauge    this node's capacity
//	kvelect_fleet_node_priority              gauge    this node's priority
//	kvelect_fleet_node_is_member             gauge    1 while this node is a member of the fleet
//
// The caller registers it, counts each run of a daemon with Ran (from the
// daemon's fleet.Daemon.Run) and runs Watch for the time a daemon runs
// nowhere.
type FleetCollector struct {
	nodeName string
	capacity int
	priority int
	bucket   *election.Bucket
	node     func() *fleet.Node // nil until the node has joined

	starts   *prometheus.CounterVec
	restarts *prometheus.CounterVec
	runsHere *prometheus.Desc
	nowhereD *prometheus.Desc
	members  *prometheus.Desc
	running  *prometheus.Desc
	capDesc  *prometheus.Desc
	prioDesc *prometheus.Desc
	isMember *prometheus.Desc

	mu      sync.Mutex
	tokens  map[string]uint64    // by daemon: the token of this node's latest run
	nowhere map[string]time.Time // by daemon seen: since when it runs nowhere (zero: it runs)
	last    time.Time            // when the fleet was last read
}

var _ prometheus.Collector = (*FleetCollector)(nil)

// NewFleetCollector returns the collector of the node cfg describes (its
// Name, Capacity, Priority and the Daemons it can run, whose counters exist
// at 0 from the start), in the fleet of the bucket b. node returns the
// node once it has joined (the *fleet.Node of fleet.Join), nil before;
// until then the node's series say it is not a member.
func NewFleetCollector(b *election.Bucket, cfg fleet.Config, node func() *fleet.Node) *FleetCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("kvelect", "fleet", name), help, labels, nil)
	}
	m := &FleetCollector{
		nodeName: cfg.Name,
		capacity: cfg.Capacity,
		priority: cfg.Priority,
		bucket:   b,
		node:     node,
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kvelect", Subsystem: "fleet", Name: "daemon_starts_total",
			Help: "Times this node began to run the daemon under a new hold (a new fencing token): the daemon moved here. Summed over the nodes, how often the fleet moves it."}, []string{"daemon", "node"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kvelect", Subsystem: "fleet", Name: "daemon_restarts_total",
			Help: "Times the daemon returned by itself on this node and was started again under the same hold."}, []string{"daemon", "node"}),
		runsHere: desc("daemon_runs_here", "1 while the daemon runs on this node (or waits out a backoff between two runs, or drains to move), else 0.", "daemon", "node"),
		nowhereD: desc("daemon_run_nowhere_seconds", "How long the daemon has run on no node, as this node sees the fleet; 0 while it runs somewhere. Covers the daemons this node can run and every daemon it has seen since it started.", "daemon", "node"),
		members:  desc("members", "The live members of the fleet as this node sees it.", "node"),
		running:  desc("node_daemons", "The daemons this node runs (or drains to move).", "node"),
		capDesc:  desc("node_capacity", "This node's capacity: its weight in placement.", "node"),
		prioDesc: desc("node_priority", "This node's priority (--priority): daemons start on the live nodes of the highest priority that list them.", "node"),
		isMember: desc("node_is_member", "1 while this node is a member of the fleet (it leads its node key), else 0.", "node"),
		tokens:   map[string]uint64{},
		nowhere:  map[string]time.Time{},
	}
	for _, d := range cfg.Daemons {
		m.starts.WithLabelValues(d.Name, cfg.Name)
		m.restarts.WithLabelValues(d.Name, cfg.Name)
		m.nowhere[d.Name] = time.Time{}
	}
	return m
}

// Ran counts a run of daemon d under token, the fencing token of the node's
// hold on it (election.TokenFromContext of the daemon's Run): a start if
// the token is new, else a restart.
func (m *FleetCollector) Ran(d string, token uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tokens[d] == token {
		m.restarts.WithLabelValues(d, m.nodeName).Inc()
		return
	}
	m.tokens[d] = token
	m.starts.WithLabelValues(d, m.nodeName).Inc()
}

// sample reads the fleet and notes which daemons run nowhere since when.
// It reads what the bucket's watcher holds: no request to the servers.
func (m *FleetCollector) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := fleet.ReadStatus(ctx, m.bucket)
	if err != nil {
		return
	}
	now := time.Now()
	runs := map[string]bool{}
	for _, d := range st.Daemons {
		runs[d.Name] = d.State == fleet.Running || d.State == fleet.Revoking
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = now
	for d := range runs {
		if _, ok := m.nowhere[d]; !ok {
			m.nowhere[d] = time.Time{}
		}
	}
	for d, since := range m.nowhere {
		switch {
		case runs[d]:
			m.nowhere[d] = time.Time{}
		case since.IsZero():
			m.nowhere[d] = now
		}
	}
}

// Watch samples the fleet every interval until ctx is done, so that the
// time a daemon runs nowhere counts from when it stopped, not from a
// scrape. It reads what the bucket's watcher holds: no request to the
// servers.
func (m *FleetCollector) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Describe sends the descriptors of the node's series.
func (m *FleetCollector) Describe(ch chan<- *prometheus.Desc) {
	m.starts.Describe(ch)
	m.restarts.Describe(ch)
	for _, d := range []*prometheus.Desc{m.runsHere, m.nowhereD, m.members, m.running, m.capDesc, m.prioDesc, m.isMember} {
		ch <- d
	}
}

// Collect reads the node, if it has joined, and sends its series.
func (m *FleetCollector) Collect(ch chan<- prometheus.Metric) {
	m.starts.Collect(ch)
	m.restarts.Collect(ch)
	var node *fleet.Node
	if m.node != nil {
		node = m.node()
	}
	here := map[string]bool{}
	var members, running int
	member := 0.0
	if node != nil {
		for _, d := range node.Daemons() {
			if d.State == fleet.Running || d.State == fleet.Revoking {
				here[d.Name] = true
				running++
			}
		}
		members = len(node.Members())
		if node.IsMember() {
			member = 1
		}
	}
	m.mu.Lock()
	now := time.Now()
	daemons := make([]string, 0, len(m.nowhere))
	for d := range m.nowhere {
		daemons = append(daemons, d)
	}
	slices.Sort(daemons)
	for _, d := range daemons {
		runsHere := 0.0
		if here[d] {
			runsHere = 1
		}
		ch <- prometheus.MustNewConstMetric(m.runsHere, prometheus.GaugeValue, runsHere, d, m.nodeName)
		seconds := 0.0
		if since := m.nowhere[d]; !since.IsZero() && !here[d] {
			seconds = now.Sub(since).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(m.nowhereD, prometheus.GaugeValue, seconds, d, m.nodeName)
	}
	m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(m.members, prometheus.GaugeValue, float64(members), m.nodeName)
	ch <- prometheus.MustNewConstMetric(m.running, prometheus.GaugeValue, float64(running), m.nodeName)
	ch <- prometheus.MustNewConstMetric(m.capDesc, prometheus.GaugeValue, float64(m.capacity), m.nodeName)
	ch <- prometheus.MustNewConstMetric(m.prioDesc, prometheus.GaugeValue, float64(m.priority), m.nodeName)
	ch <- prometheus.MustNewConstMetric(m.isMember, prometheus.GaugeValue, member, m.nodeName)
}
