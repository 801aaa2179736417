package promelection_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// The alert rules and the dashboard shipped in deploy/ must name only series
// the collector exports, with its labels.
const (
	rulesFile     = "../deploy/prometheus/kvelect-rules.yml"
	dashboardFile = "../deploy/grafana/kvelect-dashboard.json"
)

var (
	metricName = regexp.MustCompile(`kvelect_election_[a-z_]+`)
	grouping   = regexp.MustCompile(`(?:by|on) \(([^)]*)\)`)
)

// exported returns the metric families a collector exports for a running
// election whose health it watches, each with its label names.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DEPLOY", TTL: 2 * time.Second})
	c, reg := newCollector(t)
	won := make(chan struct{}, 1)
	e := start(t, "a", kv, c, election.OnWon(func() { won <- struct{}{} }))
	c.WatchHealth(e)
	<-won
	// A clock rate is measured only once the writes span 5 TTLs, and a
	// health check's series come with one that fails: they come from
	// events recorded here instead.
	c.Record(election.Event{Kind: election.EventClockRate, Key: e.Key(), Name: e.Name(), Clock: election.ClockCheck{Rate: 1, RateLow: 1, RateHigh: 1}})
	c.Record(election.Event{Kind: election.EventHealth, Key: e.Key(), Name: e.Name()})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range families {
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		out[f.GetName()] = labels
	}
	return out
}

// checkNames fails the test for every metric in text the collector does not
// export (histograms by their _bucket, _sum and _count series), and for
// every label a by or on clause names that no series has.
func checkNames(t *testing.T, file, text string, families map[string][]string) {
	t.Helper()
	// daemon and node are the labels of the FleetCollector's
	// kvelect_fleet_* series, which TestDeployedRulesAndDashboardUseFleetSeries
	// checks; bucket is one of election check's kvelect_check_* series,
	// which cmd/election's TestDeployedRulesUseCheckSeries checks.
	labels := map[string]bool{"le": true, "daemon": true, "node": true, "bucket": true}
	for _, names := range families {
		for _, n := range names {
			labels[n] = true
		}
	}
	for _, name := range metricName.FindAllString(text, -1) {
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && families[base] != nil {
				family = base
			}
		}
		if families[family] == nil {
			t.Errorf("%s uses %s, which the collector does not export", file, name)
		}
	}
	for _, m := range grouping.FindAllStringSubmatch(text, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); !labels[l] {
				t.Errorf("%s groups by label %q, which no exported series has", file, l)
			}
		}
	}
}

func TestDeployedRulesAndDashboardUseExportedSeries(t *testing.T) {
	families := exported(t)
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	checkNames(t, rulesFile, string(rules), families)
	for _, alert := range []string{"KvelectNoLeader", "KvelectMoreThanOneLeader", "KvelectFrequentLeaderChanges", "KvelectLeaderUnhealthy", "KvelectRenewalsSlow", "KvelectRenewalsFailing", "KvelectClockRate", "KvelectClockRateBeyondBound", "KvelectServerClockJump", "KvelectHealthCheckFailing", "KvelectDaemonRunsNowhere", "KvelectFleetMovesDaemonsOften", "KvelectJobDidNotRun", "KvelectJobFailed"} {
		anchor := "docs/alerts.md#" + strings.ToLower(alert)
		if !strings.Contains(string(rules), "alert: "+alert+"\n") || !strings.Contains(string(rules), anchor) {
			t.Errorf("%s lacks the alert %s or its runbook link %s", rulesFile, alert, anchor)
		}
	}
	runbook, err := os.ReadFile("../docs/alerts.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, heading := range regexp.MustCompile(`alerts\.md#([a-z]+)`).FindAllStringSubmatch(string(rules), -1) {
		if !regexp.MustCompile(`(?mi)^### ` + heading[1] + `$`).Match(runbook) {
			t.Errorf("docs/alerts.md has no heading for the runbook anchor #%s", heading[1])
		}
	}

	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct{ Name, Type string } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var variables []string
	for _, v := range dashboard.Templating.List {
		variables = append(variables, v.Name+":"+v.Type)
	}
	if dashboard.UID == "" || !slices.Contains(variables, "datasource:datasource") || !slices.Contains(variables, "key:query") {
		t.Errorf("%s: uid %q, variables %v; want a uid, a datasource variable and a key variable", dashboardFile, dashboard.UID, variables)
	}
	ids := map[int]bool{}
	for _, p := range dashboard.Panels {
		if ids[p.ID] || len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has a repeated id %d or no query", dashboardFile, p.Title, p.ID)
		}
		ids[p.ID] = true
		for _, target := range p.Targets {
			checkNames(t, dashboardFile+" panel "+p.Title, target.Expr, families)
		}
	}
}
