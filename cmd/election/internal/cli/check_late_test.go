package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// checkSample is one election check --format json of a key: its status and
// the renewal age it measured (-1 without a leader).
type checkSample struct {
	status string
	age    float64
	out    string
}

func sampleCheck(t *testing.T, url, bucket, key string) checkSample {
	t.Helper()
	_, stdout, _ := runCLI(t, "check", "-s", url, "--bucket", bucket, "--key", key, "--format", "json")
	var r checkResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("check's JSON %q: %v", stdout, err)
	}
	s := checkSample{status: r.Status, age: -1, out: strings.TrimSpace(stdout)}
	for _, p := range r.PerfData {
		if p.Name == "renew_age:"+key {
			s.age = p.Value
		}
	}
	return s
}

// TestCheckDoesNotWarnOnAHealthyLeader: 100 checks of a leader renewing at
// the default interval of a 5 s TTL (every 3.75 s), spread over more than one
// renewal, are all OK, though they see its latest write older than half
// the TTL, where check used to warn.
func TestCheckDoesNotWarnOnAHealthyLeader(t *testing.T) {
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "HEALTHY", TTL: 5 * time.Second})
	e, err := election.NewElection(context.Background(), "host-a", "job", kv, election.WithoutSplay())
	if err != nil {
		t.Fatal(err)
	}
	startUntilCleanup(t, e)
	testenv.Eventually(t, "host-a leads", e2e.WaitTimeout, e.IsLeader)

	start := time.Now()
	oldest := 0.0
	for i := range 100 {
		c := sampleCheck(t, url, "HEALTHY", "job")
		if c.status != "OK" {
			t.Errorf("check %d: %s, want OK: %s", i, c.status, c.out)
		}
		oldest = max(oldest, c.age)
		time.Sleep(40 * time.Millisecond)
	}
	t.Logf("100 checks in %v; the oldest latest write seen %.3fs", time.Since(start).Round(time.Millisecond), oldest)
	if oldest < 2.5 {
		t.Errorf("the checks never saw a write older than half the TTL (oldest %.3fs): they did not cover a renewal cycle", oldest)
	}
}

// TestCheckWarnsThenFailsOnALateRenewal: a leader at a 5 s TTL whose
// connection is blackholed: check is OK until its latest write is older
// than the documented 3.979 s, WARNING from then until 4.208 s (its
// validity), then CRITICAL, and never goes back; the dashboard shows the
// renewal on time, late and lapsed at the same ages.
func TestCheckWarnsThenFailsOnALateRenewal(t *testing.T) {
	const ttl = 5 * time.Second
	late, lapsed := renewalLimits(ttl, 0)
	if got := fmt.Sprintf("%v %v", late.Round(time.Millisecond), lapsed.Round(time.Millisecond)); got != "3.979s 4.208s" {
		t.Fatalf("the limits at a 5 s TTL are %s; the help and docs/operations.md say 3.979s 4.208s", got)
	}
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LATE", TTL: ttl})
	b, err := election.OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	d := newDashboard(b, js, "LATE")
	dashboardSaw := map[string]bool{}
	proxy, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	_, pjs := testenv.Connect(t, proxy.URL())
	pkv, err := pjs.KeyValue(context.Background(), "LATE")
	if err != nil {
		t.Fatal(err)
	}
	e, err := election.NewElection(context.Background(), "host-a", "job", pkv, election.WithoutSplay())
	if err != nil {
		t.Fatal(err)
	}
	startUntilCleanup(t, e)
	t.Cleanup(proxy.Heal) // before the election stops, so that it can release the key
	testenv.Eventually(t, "host-a leads", e2e.WaitTimeout, e.IsLeader)

	proxy.Blackhole()
	rank := map[string]int{"OK": 0, "WARNING": 1, "CRITICAL": 2}
	worst, warnings := 0, 0
	deadline := time.Now().Add(2 * ttl)
	for time.Now().Before(deadline) {
		c := sampleCheck(t, url, "LATE", "job")
		want := "OK"
		switch {
		case c.age < 0 || c.age > lapsed.Seconds():
			want = "CRITICAL"
		case c.age > late.Seconds():
			want = "WARNING"
		}
		if c.status != want {
			t.Errorf("renewal age %.3fs: %s, want %s: %s", c.age, c.status, want, c.out)
		}
		if rank[c.status] < worst {
			t.Errorf("renewal age %.3fs: %s after a worse status: %s", c.age, c.status, c.out)
		}
		worst = max(worst, rank[c.status])
		if c.status == "WARNING" {
			warnings++
		}
		rows, err := d.rows(context.Background(), "job")
		if err != nil {
			t.Fatal(err)
		}
		// The page gives the age to the millisecond; within one of a
		// limit, it may show either side.
		nearLimit := func(age float64) bool {
			return math.Abs(age-late.Seconds()) < 0.001 || math.Abs(age-lapsed.Seconds()) < 0.001
		}
		if len(rows) == 1 && rows[0].RenewedAgo != nil && !nearLimit(*rows[0].RenewedAgo) {
			row, want := rows[0], "on time"
			switch age := *row.RenewedAgo; {
			case age > lapsed.Seconds():
				want = "lapsed"
			case age > late.Seconds():
				want = "late"
			}
			if row.Renewal != want || row.Healthy != (want == "on time") {
				t.Errorf("the dashboard's row at renewal age %.3fs: %q, healthy %v; want %q", *row.RenewedAgo, row.Renewal, row.Healthy, want)
			}
			dashboardSaw[row.Renewal] = true
		}
		if c.status == "CRITICAL" {
			t.Logf("CRITICAL at age %.3fs after %d WARNINGs: %s", c.age, warnings, c.out)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if warnings == 0 || worst != 2 {
		t.Errorf("saw %d WARNINGs and a worst status %d; want WARNINGs, then CRITICAL", warnings, worst)
	}
	if !dashboardSaw["on time"] || !dashboardSaw["late"] {
		t.Errorf("the dashboard showed the renewal %v; want on time, then late", dashboardSaw)
	}
}

// TestRulesRenewalThresholdIsRenewalLimits: KvelectRenewalsSlow's threshold
// in deploy/prometheus/kvelect-rules.yml, and the Grafana dashboard's line
// for it, are late − interval of renewalLimits, for the default interval of
// every TTL the rules cover.
func TestRulesRenewalThresholdIsRenewalLimits(t *testing.T) {
	offset, rate := election.ServerClockOffset.Seconds(), 1+election.ClockRate
	const interval = "kvelect_election_campaign_interval_seconds"
	want := fmt.Sprintf("((%s * 4 / 3 - %g) / %g - %s) / 4", interval, offset, rate, interval)
	rules, err := os.ReadFile("../../../../deploy/prometheus/kvelect-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rules), "> on (key, name) ("+want+")") {
		t.Errorf("KvelectRenewalsSlow's threshold is not %s", want)
	}
	dashboard, err := os.ReadFile("../../../../deploy/grafana/kvelect-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	byKey := `max by (key) (` + interval + `{key=~\"$key\"})`
	if grafana := strings.ReplaceAll(want, interval, byKey); !strings.Contains(string(dashboard), grafana) {
		t.Errorf("the Grafana dashboard's renewal threshold is not %s", grafana)
	}
	for _, ttl := range []time.Duration{election.MinTTL, 5 * time.Second, 10 * time.Second, 30 * time.Second} {
		late, _ := renewalLimits(ttl, 0)
		i := election.TimingFor(ttl, 0).Interval.Seconds()
		promql := ((i*4/3-offset)/rate - i) / 4
		if d := promql - (late.Seconds() - i); d > 1e-6 || d < -1e-6 {
			t.Errorf("TTL %v: the rule's threshold %.6fs, renewalLimits' %.6fs", ttl, promql, late.Seconds()-i)
		}
	}
	// The figures the rules' comment and description give.
	for ttl, says := range map[time.Duration]string{10 * time.Second: "482 ms", 5 * time.Second: "229 ms", 2 * time.Second: "77 ms"} {
		late, _ := renewalLimits(ttl, 0)
		ms := (late - election.TimingFor(ttl, 0).Interval).Milliseconds()
		if got := fmt.Sprintf("%d ms", ms); got != says || !regexp.MustCompile(regexp.QuoteMeta(says)).Match(rules) {
			t.Errorf("TTL %v: the threshold is %s; the rules file should say %s", ttl, got, says)
		}
	}
}

// TestServerTimeReadsTheServersClock: the reading check ages renewals
// against is the server's, within a round trip, here where both share one.
func TestServerTimeReadsTheServersClock(t *testing.T) {
	t.Parallel()
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SRVTIME", TTL: 2 * time.Second})
	status, err := kv.Status(context.Background())
	if bs, ok := status.(*jetstream.KeyValueBucketStatus); err != nil || !ok || bs.StreamInfo().TimeStamp.IsZero() {
		t.Fatalf("the status answer carries no server time (%v): serverTime would read this host's clock", err)
	}
	before := time.Now()
	now := serverTime(context.Background(), kv)
	if got := now(); got.Before(before.Add(-time.Second)) || got.After(time.Now().Add(time.Second)) {
		t.Errorf("the server's time read %v, this host's %v", got, time.Now())
	}
}
