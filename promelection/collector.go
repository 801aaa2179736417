package promelection

import (
	"errors"
	"sync"

	"github.com/kvelect/election"
	"github.com/prometheus/client_golang/prometheus"
)

// Causes of lost leadership, as values of the cause label.
const (
	causeRevisionGone  = "revision_gone"
	causeRenewDeadline = "renew_deadline"
	causeStopped       = "stopped"
	causeHandedOver    = "handed_over"
	causeSuspended     = "suspended"
	causeClockRate     = "clock_rate"
	causeHealthCheck   = "health_check"
	causeOther         = "other"
)

// causes are every value of the cause label.
var causes = []string{causeRevisionGone, causeRenewDeadline, causeStopped, causeHandedOver, causeSuspended, causeClockRate, causeHealthCheck, causeOther}

// Collector records the measurements of any number of elections and exports
// them as Prometheus metrics (see the package documentation for the list).
// Make one with NewCollector, pass its Record to elections with
// election.WithEventHook, and register it in a prometheus.Registerer. It is safe
// for concurrent use.
type Collector struct {
	isLeader         *prometheus.GaugeVec
	won              *prometheus.CounterVec
	lost             *prometheus.CounterVec
	tenure           *prometheus.HistogramVec
	renewLatency     *prometheus.HistogramVec
	renewFailures    *prometheus.CounterVec
	campaignInterval *prometheus.GaugeVec
	acquire          *prometheus.HistogramVec
	clockRate        *prometheus.GaugeVec
	clockWarning     *prometheus.GaugeVec
	clockJumps       *prometheus.CounterVec
	clockJump        *prometheus.GaugeVec
	healthFailing    *prometheus.GaugeVec
	unhealthy        *prometheus.Desc

	mu      sync.Mutex
	watched map[*election.Election]struct{} // whose health is read at each scrape
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector makes a Collector. It returns an error wrapping
// ErrInvalidBuckets if an option gives bad histogram bounds.
func NewCollector(opts ...Option) (*Collector, error) {
	o := options{
		tenureBuckets:       defaultTenureBuckets,
		renewLatencyBuckets: defaultRenewLatencyBuckets,
		acquireBuckets:      defaultAcquireBuckets,
	}
	for _, opt := range opts {
		opt(&o)
	}
	for _, h := range []struct {
		name   string
		bounds []float64
	}{
		{"tenure_seconds", o.tenureBuckets},
		{"renew_latency_seconds", o.renewLatencyBuckets},
		{"acquire_seconds", o.acquireBuckets},
	} {
		if err := checkBuckets(h.name, h.bounds); err != nil {
			return nil, err
		}
	}

	labels := []string{"key", "name"}
	opt := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "kvelect", Subsystem: "election", Name: name, Help: help}
	}
	histogram := func(name, help string, bounds []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "kvelect", Subsystem: "election", Name: name, Help: help, Buckets: bounds,
		}, labels)
	}
	return &Collector{
		isLeader: prometheus.NewGaugeVec(prometheus.GaugeOpts(opt("is_leader",
			"1 while this candidate leads the key, else 0.")), labels),
		won: prometheus.NewCounterVec(prometheus.CounterOpts(opt("won_total",
			"Leaderships announced by this candidate.")), labels),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts(opt("lost_total",
			"Leaderships ended, by cause: revision_gone, renew_deadline, stopped, handed_over, suspended, clock_rate, health_check or other.")),
			[]string{"key", "name", "cause"}),
		tenure: histogram("tenure_seconds",
			"Length of each ended leadership, from announcement to stand-down.", o.tenureBuckets),
		renewLatency: histogram("renew_latency_seconds",
			"Round trip of each renewal of the key, failed ones included.", o.renewLatencyBuckets),
		renewFailures: prometheus.NewCounterVec(prometheus.CounterOpts(opt("renew_failures_total",
			"Renewals of the key that were not acknowledged.")), labels),
		campaignInterval: prometheus.NewGaugeVec(prometheus.GaugeOpts(opt("campaign_interval_seconds",
			"How often the leader renews the key.")), labels),
		acquire: histogram("acquire_seconds",
			"Time campaigned before each leadership: since the election started or the previous leadership ended.",
			o.acquireBuckets),
		clockRate: prometheus.NewGaugeVec(prometheus.GaugeOpts(opt("clock_rate",
			"Seconds of the stream leader's clock per second of this candidate's, as last measured (1: they agree).")), labels),
		clockWarning: prometheus.NewGaugeVec(prometheus.GaugeOpts(opt("clock_rate_warning",
			"1 while the last measured clock rate is past half the bound the election assumes, 2 past the bound itself (the candidate refuses to lead), else 0.")), labels),
		clockJumps: prometheus.NewCounterVec(prometheus.CounterOpts(opt("server_clock_jumps_total",
			"Jumps of the stream leader's stamps between two writes of this candidate beyond what round trips explain (a new stream leader whose clock is off, or a clock step).")), labels),
		clockJump: prometheus.NewGaugeVec(prometheus.GaugeOpts(opt("server_clock_jump_seconds",
			"The last jump of the stream leader's stamps, in seconds, forward if positive (0 before any).")), labels),
		healthFailing: prometheus.NewGaugeVec(prometheus.GaugeOpts(opt("health_check_failing",
			"1 while this candidate's health check (election.WithHealthCheck) fails: it claims nothing, and as leader it stands down; 0 once it passes again.")), labels),
		unhealthy: prometheus.NewDesc("kvelect_election_unhealthy",
			"1 while the election fails CheckHealth(0): it still counts itself leader past its validity deadline; else 0.",
			labels, nil),
		watched: map[*election.Election]struct{}{},
	}, nil
}

// metricVec is what the collector's metric families have in common.
type metricVec interface {
	prometheus.Collector
	DeletePartialMatch(labels prometheus.Labels) int
}

func (c *Collector) collectors() []metricVec {
	return []metricVec{
		c.isLeader, c.won, c.lost, c.tenure, c.renewLatency, c.renewFailures, c.campaignInterval, c.acquire,
		c.clockRate, c.clockWarning, c.clockJumps, c.clockJump, c.healthFailing,
	}
}

// Describe sends the descriptors of all metrics to ch; it implements
// prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
	ch <- c.unhealthy
}

// Collect sends the current value of every series to ch; it implements
// prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := range c.watched {
		unhealthy := 0.0
		if e.CheckHealth(0) != nil {
			unhealthy = 1
		}
		ch <- prometheus.MustNewConstMetric(c.unhealthy, prometheus.GaugeValue, unhealthy, e.Key(), e.Name())
	}
}

// WatchHealth exports kvelect_election_unhealthy for each of elections: at
// every scrape, 1 if its CheckHealth(0) fails (it still counts itself leader
// past its validity deadline: its campaign goroutine is stuck, or the
// process was paused), else 0. Forget stops watching an election's key and
// name.
func (c *Collector) WatchHealth(elections ...*election.Election) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range elections {
		c.watched[e] = struct{}{}
	}
}

// Forget drops every series of the election on key for candidate name. Call
// it once that election has stopped, in programs that create and discard
// elections, so that their series do not pile up; an election still running
// would bring some back at its next event.
func (c *Collector) Forget(key, name string) {
	labels := prometheus.Labels{"key": key, "name": name}
	for _, m := range c.collectors() {
		m.DeletePartialMatch(labels)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := range c.watched {
		if e.Key() == key && e.Name() == name {
			delete(c.watched, e)
		}
	}
}

// Record is an election's event hook (election.WithEventHook(c.Record)):
// it records the election's measurements. EventCampaigning records the
// campaign interval, sets is_leader to 0 and creates every counter and
// histogram at 0, so that an alert on their increase sees the first event;
// EventWon sets is_leader to 1, counts a leadership won and observes how
// long it took to acquire; EventRenewed observes a renewal's round trip and
// counts a failed one; EventLost sets is_leader to 0, counts the loss by
// cause and observes the tenure; EventStopped sets is_leader to 0 and keeps
// the series (Forget drops them); EventClockRate sets clock_rate and
// clock_rate_warning; EventClockJump counts the jump and sets its size;
// EventHealth sets health_check_failing.
func (c *Collector) Record(ev election.Event) {
	key, name := ev.Key, ev.Name
	switch ev.Kind {
	case election.EventCampaigning:
		c.campaignInterval.WithLabelValues(key, name).Set(ev.Duration.Seconds())
		c.isLeader.WithLabelValues(key, name).Set(0)
		c.won.WithLabelValues(key, name)
		c.renewFailures.WithLabelValues(key, name)
		c.tenure.WithLabelValues(key, name)
		c.renewLatency.WithLabelValues(key, name)
		c.acquire.WithLabelValues(key, name)
		c.clockWarning.WithLabelValues(key, name).Set(0)
		c.clockJumps.WithLabelValues(key, name)
		c.clockJump.WithLabelValues(key, name)
		for _, cause := range causes {
			c.lost.WithLabelValues(key, name, cause)
		}
	case election.EventWon:
		c.isLeader.WithLabelValues(key, name).Set(1)
		c.won.WithLabelValues(key, name).Inc()
		c.acquire.WithLabelValues(key, name).Observe(ev.Duration.Seconds())
	case election.EventRenewed:
		c.renewLatency.WithLabelValues(key, name).Observe(ev.Duration.Seconds())
		if ev.Err != nil {
			c.renewFailures.WithLabelValues(key, name).Inc()
		}
	case election.EventLost:
		c.isLeader.WithLabelValues(key, name).Set(0)
		c.lost.WithLabelValues(key, name, causeLabel(ev.Err)).Inc()
		c.tenure.WithLabelValues(key, name).Observe(ev.Duration.Seconds())
	case election.EventStopped:
		c.isLeader.WithLabelValues(key, name).Set(0)
	case election.EventClockRate:
		c.clockRate.WithLabelValues(key, name).Set(ev.Clock.Rate)
		warning := 0.0
		switch {
		case ev.Clock.Beyond(election.ClockRate):
			warning = 2
		case ev.Clock.Beyond(election.ClockRate / 2):
			warning = 1
		}
		c.clockWarning.WithLabelValues(key, name).Set(warning)
	case election.EventClockJump:
		c.clockJumps.WithLabelValues(key, name).Inc()
		c.clockJump.WithLabelValues(key, name).Set(ev.Clock.Jump.Seconds())
	case election.EventHealth:
		failing := 0.0
		if ev.Err != nil {
			failing = 1
		}
		c.healthFailing.WithLabelValues(key, name).Set(failing)
	}
}

// causeLabel classifies why a leadership ended.
func causeLabel(cause error) string {
	switch {
	case errors.Is(cause, election.ErrRevisionGone):
		return causeRevisionGone
	case errors.Is(cause, election.ErrRenewDeadline):
		return causeRenewDeadline
	case errors.Is(cause, election.ErrHealthCheck): // before stopped: a fleet's health move is a stop with this cause
		return causeHealthCheck
	case errors.Is(cause, election.ErrStopped):
		return causeStopped
	case errors.Is(cause, election.ErrHandedOver):
		return causeHandedOver
	case errors.Is(cause, election.ErrSuspended):
		return causeSuspended
	case errors.Is(cause, election.ErrClockRate):
		return causeClockRate
	default:
		return causeOther
	}
}
