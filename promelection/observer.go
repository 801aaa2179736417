package promelection

import (
	"sync"

	"github.com/kvelect/election"
	"github.com/prometheus/client_golang/prometheus"
)

// ObserverCollector is a prometheus.Collector of an observer's series, as
// election status --watch and election dashboard serve them: whether each
// key it follows has a leader, and how many times its leader changed, as
// this process saw it (etcd's has_leader and leader_changes_seen_total, per
// key). Every series has the label key.
//
//	kvelect_election_has_leader                gauge    1 while someone holds the key, else 0
//	kvelect_election_leader_changes_seen_total counter  times the key got a new holder
//
// The caller registers it and passes it each holder an observer reports
// (election.Bucket.Observe, ObservePrefix) with Seen.
type ObserverCollector struct {
	hasLeader *prometheus.GaugeVec
	changes   *prometheus.CounterVec

	mu      sync.Mutex
	holders map[string]string // by key: the holder last seen, "" for none
}

// NewObserverCollector returns an observer's collector, with no series
// until Seen reports a key.
func NewObserverCollector() *ObserverCollector {
	return &ObserverCollector{
		hasLeader: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "kvelect", Subsystem: "election", Name: "has_leader",
			Help: "1 while someone holds the key, as this observer sees it, else 0."}, []string{"key"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kvelect", Subsystem: "election", Name: "leader_changes_seen_total",
			Help: "Times this observer saw the key get a new holder: another candidate, or one after nobody held it."}, []string{"key"}),
		holders: map[string]string{},
	}
}

// Seen notes the key's holder l: the first one of a key sets its series
// (the counter at 0); a later, different holder counts a change. A job's
// done mark (election.Leader.DoneBy) holds the key but leads nothing.
func (m *ObserverCollector) Seen(l election.Leader) {
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

// Describe sends the descriptors of the observer's series.
func (m *ObserverCollector) Describe(ch chan<- *prometheus.Desc) {
	m.hasLeader.Describe(ch)
	m.changes.Describe(ch)
}

// Collect sends the observer's series.
func (m *ObserverCollector) Collect(ch chan<- prometheus.Metric) {
	m.hasLeader.Collect(ch)
	m.changes.Collect(ch)
}
