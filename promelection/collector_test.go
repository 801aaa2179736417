package promelection_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/kvelect/election/promelection"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// TestCollectorFollowsElections runs two candidates for one key on a real
// server through one collector: a wins and renews, stops, b takes over, and
// loses when the key is deleted.
func TestCollectorFollowsElections(t *testing.T) {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "METRICS", TTL: 2 * time.Second})
	c, reg := newCollector(t)

	wonA, wonB := make(chan struct{}, 1), make(chan struct{}, 4)
	a := start(t, "a", kv, c, election.OnWon(func() { wonA <- struct{}{} }))
	<-wonA
	expect(t, reg, `
		# HELP kvelect_election_is_leader 1 while this candidate leads the key, else 0.
		# TYPE kvelect_election_is_leader gauge
		kvelect_election_is_leader{key="svc",name="a"} 1
		# HELP kvelect_election_won_total Leaderships announced by this candidate.
		# TYPE kvelect_election_won_total counter
		kvelect_election_won_total{key="svc",name="a"} 1
		# HELP kvelect_election_campaign_interval_seconds How often the leader renews the key.
		# TYPE kvelect_election_campaign_interval_seconds gauge
		kvelect_election_campaign_interval_seconds{key="svc",name="a"} 1
		`, "is_leader", "won_total", "campaign_interval_seconds")
	if n := value(t, reg, "acquire_seconds", "svc", "a"); n != 1 {
		t.Errorf("acquire_seconds{a} has %v samples after one win, want 1", n)
	}

	testenv.Eventually(t, "a renewal of a's leadership", waitTimeout, func() bool { return value(t, reg, "renew_latency_seconds", "svc", "a") >= 1 })
	if n := value(t, reg, "renew_failures_total", "svc", "a"); n != 0 {
		t.Errorf("renew_failures_total{a} = %v with a healthy server, want 0", n)
	}

	b := start(t, "b", kv, c, election.OnWon(func() { wonB <- struct{}{} }))
	testenv.Eventually(t, "b to campaign", waitTimeout, func() bool { return exists(t, reg, "is_leader", "svc", "b") })
	a.Stop()
	if n := value(t, reg, "tenure_seconds", "svc", "a"); n != 1 {
		t.Errorf("tenure_seconds{a} has %v samples after one tenure, want 1", n)
	}

	<-wonB
	expect(t, reg, `
		# HELP kvelect_election_is_leader 1 while this candidate leads the key, else 0.
		# TYPE kvelect_election_is_leader gauge
		kvelect_election_is_leader{key="svc",name="a"} 0
		kvelect_election_is_leader{key="svc",name="b"} 1
		# HELP kvelect_election_won_total Leaderships announced by this candidate.
		# TYPE kvelect_election_won_total counter
		kvelect_election_won_total{key="svc",name="a"} 1
		kvelect_election_won_total{key="svc",name="b"} 1
		`, "is_leader", "won_total")
	if n := value(t, reg, "acquire_seconds", "svc", "b"); n != 1 {
		t.Errorf("acquire_seconds{b} has %v samples after one win, want 1", n)
	}

	if err := kv.Delete(context.Background(), "svc"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "b to lose the deleted key", waitTimeout, func() bool { return value(t, reg, "is_leader", "svc", "b") == 0 })
	b.Stop()
	expect(t, reg, `
		# HELP kvelect_election_lost_total Leaderships ended, by cause: revision_gone, renew_deadline, stopped, handed_over, suspended, clock_rate, health_check or other.
		# TYPE kvelect_election_lost_total counter
		kvelect_election_lost_total{cause="clock_rate",key="svc",name="a"} 0
		kvelect_election_lost_total{cause="clock_rate",key="svc",name="b"} 0
		kvelect_election_lost_total{cause="handed_over",key="svc",name="a"} 0
		kvelect_election_lost_total{cause="handed_over",key="svc",name="b"} 0
		kvelect_election_lost_total{cause="health_check",key="svc",name="a"} 0
		kvelect_election_lost_total{cause="health_check",key="svc",name="b"} 0
		kvelect_election_lost_total{cause="other",key="svc",name="a"} 0
		kvelect_election_lost_total{cause="other",key="svc",name="b"} 0
		kvelect_election_lost_total{cause="renew_deadline",key="svc",name="a"} 0
		kvelect_election_lost_total{cause="renew_deadline",key="svc",name="b"} 0
		kvelect_election_lost_total{cause="revision_gone",key="svc",name="a"} 0
		kvelect_election_lost_total{cause="revision_gone",key="svc",name="b"} 1
		kvelect_election_lost_total{cause="stopped",key="svc",name="a"} 1
		kvelect_election_lost_total{cause="stopped",key="svc",name="b"} 0
		kvelect_election_lost_total{cause="suspended",key="svc",name="a"} 0
		kvelect_election_lost_total{cause="suspended",key="svc",name="b"} 0
		`, "lost_total")
}

// TestCollectorCountsAFailedRenewal stalls a leader's campaign goroutine in
// OnCampaign past its validity deadline: the late renewal fails and the
// leader stands down for renew_deadline.
func TestCollectorCountsAFailedRenewal(t *testing.T) {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "STALL", TTL: 2 * time.Second})
	c, reg := newCollector(t)

	won := make(chan struct{}, 4)
	stuck, release := make(chan struct{}), make(chan struct{})
	stalled := false // only the campaign goroutine touches it
	e := start(t, "a", kv, c,
		election.OnWon(func() { won <- struct{}{} }),
		election.OnCampaign(func(s election.State) {
			if s == election.LeaderState && !stalled {
				stalled = true
				close(stuck)
				<-release
			}
		}))
	<-won
	<-stuck
	testenv.Eventually(t, "the stalled leader's deadline to pass", waitTimeout, func() bool { return !e.IsLeader() })
	close(release)
	testenv.Eventually(t, "the stalled leader to stand down", waitTimeout, func() bool {
		return value(t, reg, "lost_total", "svc", "a", "renew_deadline") == 1
	})
	if n := value(t, reg, "renew_failures_total", "svc", "a"); n != 1 {
		t.Errorf("renew_failures_total = %v after one late renewal, want 1", n)
	}
	if n := value(t, reg, "renew_latency_seconds", "svc", "a"); n != 1 {
		t.Errorf("renew_latency_seconds has %v samples after one renewal, want 1", n)
	}
}

func TestLostCauses(t *testing.T) {
	for _, tt := range []struct {
		cause error
		label string
	}{
		{fmt.Errorf("%w: revision 7 was written by another client", election.ErrRevisionGone), "revision_gone"},
		{fmt.Errorf("%w: %q at revision 9", election.ErrHandedOver, "resign"), "handed_over"},
		{fmt.Errorf("%w: timeout", election.ErrRenewDeadline), "renew_deadline"},
		{election.ErrStopped, "stopped"},
		{fmt.Errorf("%w for 5s since the leader sent its latest acknowledged write", election.ErrSuspended), "suspended"},
		{fmt.Errorf("%w: beyond the bound", election.ErrClockRate), "clock_rate"},
		{fmt.Errorf("%w: 3 times in a row", election.ErrHealthCheck), "health_check"},
		{fmt.Errorf("%w: %w", election.ErrStopped, fmt.Errorf("fleet: daemon revoked: %w", election.ErrHealthCheck)), "health_check"},
		{errors.New("something else"), "other"},
		{nil, "other"},
	} {
		c, reg := newCollector(t)
		c.Record(election.Event{Kind: election.EventLost, Key: "k", Name: "a", Err: tt.cause, Duration: time.Second})
		if n := value(t, reg, "lost_total", "k", "a", tt.label); n != 1 {
			t.Errorf("Lost(%v): lost_total{cause=%q} = %v, want 1", tt.cause, tt.label, n)
		}
	}
}

// TestCollectorRecordsTheClockChecks feeds the clock checks' events: the
// rate and what its bounds prove (a rate whose bounds straddle a threshold
// is not past it), and each jump.
func TestCollectorRecordsTheClockChecks(t *testing.T) {
	c, reg := newCollector(t)
	c.Record(election.Event{Kind: election.EventCampaigning, Key: "k", Name: "a", Duration: time.Second})
	for _, tt := range []struct {
		low, rate, high float64
		warning         float64
	}{
		{0.999, 1.0, 1.001, 0},
		{1.020, 1.026, 1.032, 0}, // past half the bound, but not surely
		{1.030, 1.035, 1.040, 1},
		{0.940, 0.945, 0.949, 2},
		{1.049, 1.052, 1.055, 1}, // past the bound, but not surely
	} {
		c.Record(election.Event{Kind: election.EventClockRate, Key: "k", Name: "a",
			Clock: election.ClockCheck{Rate: tt.rate, RateLow: tt.low, RateHigh: tt.high, Span: time.Minute}})
		if v := value(t, reg, "clock_rate", "k", "a"); v != tt.rate {
			t.Errorf("clock_rate = %v after a measurement of %v", v, tt.rate)
		}
		if v := value(t, reg, "clock_rate_warning", "k", "a"); v != tt.warning {
			t.Errorf("clock_rate_warning = %v after a measurement of %v in [%v, %v], want %v", v, tt.rate, tt.low, tt.high, tt.warning)
		}
	}
	for i, jump := range []time.Duration{300 * time.Millisecond, -40 * time.Millisecond} {
		c.Record(election.Event{Kind: election.EventClockJump, Key: "k", Name: "a", Clock: election.ClockCheck{Jump: jump, JumpError: 3 * time.Millisecond}})
		if v := value(t, reg, "server_clock_jumps_total", "k", "a"); v != float64(i+1) {
			t.Errorf("server_clock_jumps_total = %v after %d jumps", v, i+1)
		}
		if v := value(t, reg, "server_clock_jump_seconds", "k", "a"); v != jump.Seconds() {
			t.Errorf("server_clock_jump_seconds = %v after a jump of %v", v, jump)
		}
	}
}

// TestCollectorRecordsTheHealthCheck feeds the health check's events:
// health_check_failing follows the verdict.
func TestCollectorRecordsTheHealthCheck(t *testing.T) {
	c, reg := newCollector(t)
	c.Record(election.Event{Kind: election.EventCampaigning, Key: "k", Name: "a", Duration: time.Second})
	for _, tt := range []struct {
		err     error
		failing float64
	}{
		{fmt.Errorf("%w: database down", election.ErrHealthCheck), 1},
		{nil, 0},
		{fmt.Errorf("%w: database down", election.ErrHealthCheck), 1},
	} {
		c.Record(election.Event{Kind: election.EventHealth, Key: "k", Name: "a", Err: tt.err})
		if v := value(t, reg, "health_check_failing", "k", "a"); v != tt.failing {
			t.Errorf("health_check_failing = %v after a health event with error %v, want %v", v, tt.err, tt.failing)
		}
	}
}

// TestCollectorsAreIndependent registers two collectors in two registries:
// nothing is global, and nothing lands in the default registry.
func TestCollectorsAreIndependent(t *testing.T) {
	c1, reg1 := newCollector(t)
	_, reg2 := newCollector(t)
	c1.Record(election.Event{Kind: election.EventCampaigning, Key: "k", Name: "a", Duration: time.Second})
	c1.Record(election.Event{Kind: election.EventWon, Key: "k", Name: "a", Duration: time.Second})

	if n := value(t, reg1, "won_total", "k", "a"); n != 1 {
		t.Errorf("first registry: won_total = %v, want 1", n)
	}
	if exists(t, reg2, "won_total", "k", "a") {
		t.Error("second registry shows the first collector's series")
	}
	defaults, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range defaults {
		if strings.HasPrefix(f.GetName(), "kvelect_") {
			t.Errorf("default registry has %s", f.GetName())
		}
	}
}

func TestForgetDropsAnElectionsSeries(t *testing.T) {
	c, reg := newCollector(t)
	for _, name := range []string{"a", "b"} {
		c.Record(election.Event{Kind: election.EventCampaigning, Key: "k", Name: name, Duration: time.Second})
		c.Record(election.Event{Kind: election.EventWon, Key: "k", Name: name, Duration: time.Second})
		c.Record(election.Event{Kind: election.EventRenewed, Key: "k", Name: name, Duration: time.Millisecond, Err: nil})
		c.Record(election.Event{Kind: election.EventLost, Key: "k", Name: name, Err: election.ErrStopped, Duration: time.Minute})
		c.Record(election.Event{Kind: election.EventClockRate, Key: "k", Name: name, Clock: election.ClockCheck{Rate: 1, RateLow: 0.99, RateHigh: 1.01, Span: time.Minute}})
		c.Record(election.Event{Kind: election.EventClockJump, Key: "k", Name: name, Clock: election.ClockCheck{Jump: time.Second, JumpError: time.Millisecond}})
		c.Record(election.Event{Kind: election.EventStopped, Key: "k", Name: name})
	}
	c.Forget("k", "a")
	for _, metric := range []string{"is_leader", "won_total", "lost_total", "tenure_seconds",
		"renew_latency_seconds", "renew_failures_total", "campaign_interval_seconds", "acquire_seconds",
		"clock_rate", "clock_rate_warning", "server_clock_jumps_total", "server_clock_jump_seconds"} {
		if exists(t, reg, metric, "k", "a") {
			t.Errorf("%s{name=a} is still there after Forget", metric)
		}
		if !exists(t, reg, metric, "k", "b") {
			t.Errorf("%s{name=b} is gone after Forget of a", metric)
		}
	}
}

func TestNewCollectorRejectsBadBuckets(t *testing.T) {
	for _, tt := range []struct {
		name string
		opt  promelection.Option
		says string
	}{
		{"none", promelection.WithTenureBuckets(nil), "for tenure_seconds: none given"},
		{"not increasing", promelection.WithRenewLatencyBuckets([]float64{0.1, 0.1}), "for renew_latency_seconds: [0.1 0.1]"},
		{"zero", promelection.WithAcquireBuckets([]float64{0, 1}), "for acquire_seconds: [0 1]"},
		{"infinite", promelection.WithAcquireBuckets([]float64{1, math.Inf(1)}), "finite positive bounds in increasing order"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := promelection.NewCollector(tt.opt)
			if !errors.Is(err, promelection.ErrInvalidBuckets) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("got (%v, %v), want ErrInvalidBuckets saying %q", c, err, tt.says)
			}
		})
	}
}

func TestBucketOptionsApply(t *testing.T) {
	want := []float64{0.001, 0.01, 0.1}
	c, reg := newCollector(t, promelection.WithRenewLatencyBuckets(want))
	c.Record(election.Event{Kind: election.EventRenewed, Key: "k", Name: "a", Duration: 5 * time.Millisecond, Err: nil})
	m := find(t, reg, "renew_latency_seconds", "k", "a")
	var got []float64
	for _, b := range m.GetHistogram().GetBucket() {
		got = append(got, b.GetUpperBound())
	}
	if !slices.Equal(got, want) {
		t.Errorf("renew_latency_seconds buckets = %v, want %v", got, want)
	}
}

// newCollector makes a collector registered in a registry of its own.
func newCollector(t *testing.T, opts ...promelection.Option) (*promelection.Collector, *prometheus.Registry) {
	t.Helper()
	c, err := promelection.NewCollector(opts...)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	return c, reg
}

// start runs an election of candidate name for the key "svc" until the test
// ends (or it is stopped earlier), reporting to c.
func start(t *testing.T, name string, kv jetstream.KeyValue, c *promelection.Collector, opts ...election.Option) *election.Election {
	t.Helper()
	opts = append([]election.Option{election.WithoutSplay(), election.WithEventHook(c.Record), election.WithCampaignInterval(time.Second)}, opts...)
	e, err := election.NewElection(context.Background(), name, "svc", kv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	t.Cleanup(func() {
		e.Stop()
		if err := <-done; err != nil {
			t.Errorf("Start of %s: %v", name, err)
		}
	})
	return e
}

// expect compares the named kvelect_election_ families in reg with want, in
// the text exposition format.
func expect(t *testing.T, reg prometheus.Gatherer, want string, metrics ...string) {
	t.Helper()
	names := make([]string, len(metrics))
	for i, m := range metrics {
		names[i] = "kvelect_election_" + m
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// find returns the series of kvelect_election_<metric> with the labels key,
// name and (for lost_total) cause, or nil.
func find(t *testing.T, reg prometheus.Gatherer, metric, key, name string, cause ...string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"key": key, "name": name}
	if len(cause) > 0 {
		want["cause"] = cause[0]
	}
	for _, f := range families {
		if f.GetName() != "kvelect_election_"+metric {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue series
				}
			}
			return m
		}
	}
	return nil
}

func exists(t *testing.T, reg prometheus.Gatherer, metric, key, name string) bool {
	t.Helper()
	return find(t, reg, metric, key, name) != nil
}

// value returns a series' value: a gauge's or a counter's, or a histogram's
// sample count; -1 if there is no such series.
func value(t *testing.T, reg prometheus.Gatherer, metric, key, name string, cause ...string) float64 {
	t.Helper()
	m := find(t, reg, metric, key, name, cause...)
	switch {
	case m == nil:
		return -1
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	default:
		return float64(m.GetHistogram().GetSampleCount())
	}
}

// waitTimeout bounds the tests' waits for a condition no event announces.
const waitTimeout = 10 * time.Second

// TestEverySeriesExistsAtZeroFromTheStart checks, for a candidate that has
// never led, that every series an alert may use exists, at zero.
func TestEverySeriesExistsAtZeroFromTheStart(t *testing.T) {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ZERO", TTL: 2 * time.Second})
	c, reg := newCollector(t)
	won := make(chan struct{}, 1)
	start(t, "a", kv, c, election.OnWon(func() { won <- struct{}{} }))
	<-won
	start(t, "b", kv, c)
	testenv.Eventually(t, "b to campaign", waitTimeout, func() bool { return exists(t, reg, "is_leader", "svc", "b") })
	for _, metric := range []string{"is_leader", "won_total", "tenure_seconds", "renew_latency_seconds", "renew_failures_total", "acquire_seconds",
		"clock_rate_warning", "server_clock_jumps_total"} {
		if v := value(t, reg, metric, "svc", "b"); v != 0 {
			t.Errorf("%s{b} = %v before b ever led, want a series at 0", metric, v)
		}
	}
	for _, cause := range []string{"revision_gone", "renew_deadline", "stopped", "handed_over", "suspended", "clock_rate", "other"} {
		if v := value(t, reg, "lost_total", "svc", "b", cause); v != 0 {
			t.Errorf("lost_total{b,%s} = %v before b ever led, want a series at 0", cause, v)
		}
	}
	if v := value(t, reg, "campaign_interval_seconds", "svc", "b"); v != 1 {
		t.Errorf("campaign_interval_seconds{b} = %v, want 1", v)
	}
}

// TestWatchHealthExportsAStuckLeader stalls a leader's renewal: its
// unhealthy gauge turns 1 past the validity deadline, and 0 once it is let
// go.
func TestWatchHealthExportsAStuckLeader(t *testing.T) {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "STUCK", TTL: 2 * time.Second})
	c, reg := newCollector(t)
	stuck, release := make(chan struct{}), make(chan struct{})
	var stall sync.Once
	e := start(t, "a", kv, c, election.OnCampaign(func(s election.State) {
		if s == election.LeaderState {
			stall.Do(func() {
				close(stuck)
				<-release
			})
		}
	}))
	c.WatchHealth(e)
	if v := value(t, reg, "unhealthy", "svc", "a"); v != 0 {
		t.Errorf("unhealthy{a} = %v at the start, want 0", v)
	}
	<-stuck
	testenv.Eventually(t, "unhealthy{a} = 1 while its renewal is stuck", waitTimeout, func() bool { return value(t, reg, "unhealthy", "svc", "a") == 1 })
	close(release)
	testenv.Eventually(t, "unhealthy{a} = 0 once let go", waitTimeout, func() bool { return value(t, reg, "unhealthy", "svc", "a") == 0 })
	c.Forget("svc", "a")
	if exists(t, reg, "unhealthy", "svc", "a") {
		t.Error("unhealthy{a} still exported after Forget")
	}
}
