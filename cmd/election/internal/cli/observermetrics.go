package cli

import (
	"net/http"
	"sync"

	"github.com/kvelect/election"
	"github.com/prometheus/client_golang/prometheus"
)

// observerMetrics are the series of an observer's --metrics (status --watch,
// dashboard): whether each key it follows has a leader, and how many times
// its leader changed, as this process saw it (etcd's has_leader and
// leader_changes_seen_total, per key).
type observerMetrics struct {
	hasLeader *prometheus.GaugeVec
	changes   *prometheus.CounterVec

	mu      sync.Mutex
	holders map[string]string // by key: the holder last seen, "" for none
}

func newObserverMetrics() *observerMetrics {
	return &observerMetrics{
		hasLeader: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "kvelect", Subsystem: "election", Name: "has_leader",
			Help: "1 while someone holds the key, as this observer sees it, else 0."}, []string{"key"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kvelect", Subsystem: "election", Name: "leader_changes_seen_total",
			Help: "Times this observer saw the key get a new holder: another candidate, or one after nobody held it."}, []string{"key"}),
		holders: map[string]string{},
	}
}

// seen notes the key's holder l: the first one of a key sets its series
// (the counter at 0); a later, different holder counts a change.
func (m *observerMetrics) seen(l election.Leader) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, known := m.holders[l.Key]
	m.holders[l.Key] = l.Name
	has := 0.0
	if _, done := l.DoneBy(); l.Name != "" && !done { // a job's done mark leads nothing
		has = 1
	}
	m.hasLeader.WithLabelValues(l.Key).Set(has)
	counter := m.changes.WithLabelValues(l.Key) // exists at 0 from the first sight
	if known && l.Name != "" && l.Name != old {
		counter.Inc()
	}
}

func (m *observerMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.hasLeader.Describe(ch)
	m.changes.Describe(ch)
}

func (m *observerMetrics) Collect(ch chan<- prometheus.Metric) {
	m.hasLeader.Collect(ch)
	m.changes.Collect(ch)
}

// listenObserverMetrics listens on addr (or returns nil, nil without one)
// and serves /metrics with an observer's series, and /healthz (200 while
// the process runs).
func listenObserverMetrics(addr string) (*metricsServer, *observerMetrics, error) {
	if addr == "" {
		return nil, nil, nil
	}
	om := newObserverMetrics()
	m, err := listenRegistry(addr, om)
	if err != nil {
		return nil, nil, err
	}
	m.serveHealth(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) }))
	return m, om, nil
}
