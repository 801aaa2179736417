package promelection_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/promelection"
	"github.com/prometheus/client_golang/prometheus"
)

// TestDeployedRulesAndDashboardUseFleetSeries checks that every
// kvelect_fleet_* series the alert rules and the dashboard name is one a
// FleetCollector exports (TestDeployedRulesAndDashboardUseExportedSeries checks
// the Collector's kvelect_election_* ones), and that its counters exist at
// 0 before anything ran.
func TestDeployedRulesAndDashboardUseFleetSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(promelection.NewFleetCollector(nil, fleet.Config{Name: "n", Capacity: 1, Daemons: []fleet.Daemon{{Name: "d"}}}, nil))
	om := promelection.NewObserverCollector()
	om.Seen(election.Leader{Key: "k", Name: "a"})
	reg.MustRegister(om)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
		if f.GetType().String() == "COUNTER" && f.GetMetric()[0].GetCounter().GetValue() != 0 {
			t.Errorf("%s starts at %v, want 0", f.GetName(), f.GetMetric()[0].GetCounter().GetValue())
		}
	}
	for _, want := range []string{"kvelect_fleet_daemon_starts_total", "kvelect_fleet_daemon_restarts_total", "kvelect_fleet_daemon_runs_here",
		"kvelect_fleet_daemon_run_nowhere_seconds", "kvelect_fleet_members", "kvelect_election_has_leader", "kvelect_election_leader_changes_seen_total"} {
		if !exported[want] {
			t.Errorf("%s is not exported; got %v", want, exported)
		}
	}
	names := regexp.MustCompile(`kvelect_fleet_[a-z_]+`)
	for _, file := range []string{"../deploy/prometheus/kvelect-rules.yml", "../deploy/grafana/kvelect-dashboard.json"} {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		used := names.FindAllString(string(text), -1)
		if len(used) == 0 {
			t.Errorf("%s names no kvelect_fleet_* series", file)
		}
		for _, name := range used {
			if !exported[name] {
				t.Errorf("%s uses %s, which a FleetCollector does not export", file, name)
			}
		}
	}
}
