// Package promelection exports an election's measurements as Prometheus
// metrics, and those of a fleet node (FleetCollector, the series of
// election agent --metrics) and of an observer of a bucket
// (ObserverCollector, those of election status --watch and election
// dashboard).
//
// A Collector is both an election event hook, its Record passed to
// elections with election.WithEventHook, and a prometheus.Collector, registered by the caller
// in a registry of its choice. The package registers nothing by itself and
// keeps no global state, so several collectors can live in one process.
//
//	metrics, err := promelection.NewCollector()
//	if err != nil {
//		return err
//	}
//	registry.MustRegister(metrics)
//	e, err := election.NewElection(ctx, "replica-1", "scheduler", kv, election.WithEventHook(metrics.Record))
//
// # Metrics
//
// Every series carries the labels key (the election key) and name (the
// candidate); lost_total adds cause.
//
//	kvelect_election_is_leader                 gauge      1 while this candidate leads, else 0
//	kvelect_election_won_total                 counter    leaderships announced
//	kvelect_election_lost_total                counter    leaderships ended, by cause
//	kvelect_election_tenure_seconds            histogram  length of each ended leadership
//	kvelect_election_renew_latency_seconds     histogram  round trip of each renewal, failed ones included
//	kvelect_election_renew_failures_total      counter    renewals not acknowledged
//	kvelect_election_campaign_interval_seconds gauge      how often the leader renews
//	kvelect_election_acquire_seconds           histogram  campaign time before each leadership
//	kvelect_election_clock_rate                gauge      the candidate's clock rate against the stream leader's, as last measured
//	kvelect_election_clock_rate_warning        gauge      1 past half the assumed bound, 2 past the bound (refusing to lead), else 0
//	kvelect_election_server_clock_jumps_total  counter    jumps of the stream leader's stamps (a new stream leader whose clock is off)
//	kvelect_election_server_clock_jump_seconds gauge      the last such jump, forward if positive
//	kvelect_election_health_check_failing      gauge      1 while the app's health check (WithHealthCheck) fails, 0 once it passes again
//	kvelect_election_unhealthy                 gauge      1 while CheckHealth fails (elections given to WatchHealth)
//
// The cause of a lost leadership is revision_gone (another client wrote,
// deleted or purged the key, or it expired: election.ErrRevisionGone),
// renew_deadline (the leader could not renew in time and stood down:
// election.ErrRenewDeadline), stopped (the election was stopped:
// election.ErrStopped), handed_over (it resigned or transferred leadership
// on request: election.ErrHandedOver), suspended (the machine slept while
// it led: election.ErrSuspended), clock_rate (its clock runs past the
// assumed bound: election.ErrClockRate), health_check (the app's health
// check failed too often in a row, or a fleet moved the daemon for its
// node's failing check: election.ErrHealthCheck), or other.
//
// The clock series come from the election's clock checks
// (election.EventClockRate, election.EventClockJump): clock_rate exists
// once a candidate has measured its rate over 5 TTLs, in seconds of the
// stream leader's clock per second of its own (1.03: its clock runs 3%
// slow); clock_rate_warning is what the measurement's bounds prove, so
// round trips do not raise it. Alert on clock_rate_warning > 0 and on an
// increase of server_clock_jumps_total with abs(server_clock_jump_seconds)
// above 0.1 (the servers' clock offset the deadlines allow for). Every counter and histogram,
// and lost_total for every cause, starts at 0 when an election begins to
// campaign, so that rates, increases and alerts on them see the first event.
//
// The alert rules and the Grafana dashboard in the repository's deploy/
// directory use these series; docs/alerts.md explains each alert.
//
// When an election stops, its is_leader stays at 0 rather than vanishing, so
// that an alert on sum by (key) (kvelect_election_is_leader) == 0 still fires
// when a process stops its last candidate but keeps serving metrics.
// Programs that create and discard many elections call Forget once an
// election has stopped to drop all its series.
//
// Elections in different buckets that share a key and a name share series:
// give each bucket its own collector and tell them apart with
// prometheus.WrapRegistererWith.
package promelection
