//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is what the checker found in one run. Its exported fields are the
// JSON summary.
type report struct {
	TTL     time.Duration `json:"-"`
	TTLMS   float64       `json:"ttl_ms"`
	Cluster bool          `json:"cluster"`
	// Topology is "supercluster" or "leaf" in those modes.
	Topology string `json:"topology,omitempty"`
	// SyncAlways: the servers fsync each write before acknowledging it
	// (sync_interval: always), as docs/design.md asks of production.
	SyncAlways bool `json:"sync_always"`
	// Seed replays the combinations' draws: chaos -seed N.
	Seed    uint64  `json:"seed"`
	Fleet   bool    `json:"fleet"`
	Agents  bool    `json:"agents,omitempty"`
	Daemons int     `json:"daemons,omitempty"`
	Workers int     `json:"workers"`
	Rounds  int     `json:"rounds"`
	RunMS   float64 `json:"run_ms"`

	Faults    int `json:"faults_injected"`
	Elections int `json:"elections"`

	SplitBrainMS       float64 `json:"split_brain_ms"`
	SplitBrainEpisodes int     `json:"split_brain_episodes"`
	SplitBrainRawMS    float64 `json:"split_brain_raw_ms"`

	// The works (won to OnWon's return) of different workers that
	// overlapped, and for how long in all (checkWork); the works of
	// workers stopped past their validity, counted until their key could
	// age out (works).
	WorkOverlaps  int     `json:"work_overlaps"`
	WorkOverlapMS float64 `json:"work_overlap_ms"`
	WorksCut      int     `json:"works_cut_at_suspension"`
	// StopDelayMS: how long a worker's work went on after its leadership
	// context was cancelled, at most (-stop-delay; 0 in a fleet run).
	StopDelayMS float64 `json:"stop_delay_ms"`

	SelfDemotion       stats   `json:"self_demotion_ms"`
	DemotionBoundMS    float64 `json:"self_demotion_bound_ms"`
	DemotionViolations int     `json:"self_demotion_violations"`

	DuplicateTokens  int `json:"duplicate_tokens"`
	TokenRegressions int `json:"token_regressions"`
	UnbackedWins     int `json:"unbacked_wins"`
	UnauditedWins    int `json:"unaudited_wins"`
	UnvalidatedWins  int `json:"unvalidated_wins"`

	ActsAccepted        int  `json:"acts_accepted"`
	StaleTokensAccepted int  `json:"stale_tokens_accepted"`
	UnfencedOverlaps    int  `json:"unfenced_overlaps"`
	FenceUnread         bool `json:"fence_unread"`

	QuorumLossLeaders int `json:"leaders_during_quorum_loss"`
	// CutLeaders counts, in -supercluster and -leaf, wins resting on a
	// write sent while the worker's region was cut off from the bucket's
	// home region, or while the bucket's server was down (checkCuts).
	CutLeaders int `json:"leaders_across_cut"`

	HistoryWins       int  `json:"history_wins_recorded"`
	HistoryMissing    int  `json:"history_wins_missing"`
	HistoryExcused    int  `json:"history_wins_excused"` // killed, or JetStream unavailable, within recordGrace of the win
	HistoryDuplicated int  `json:"history_duplicated"`
	HistoryUnknown    int  `json:"history_unknown"`
	HistoryUnread     bool `json:"history_unread"`

	RoundTrip stats `json:"kv_round_trip_ms"` // KV calls outside fault windows

	// ReplicasAgree: every server's copy of the bucket's stream agreed
	// after the run (cluster runs; nil elsewhere).
	ReplicasAgree *bool `json:"replicas_agree,omitempty"`

	// The linearizability check of every recorded write (checkKV).
	KVOps           int     `json:"kv_ops_checked"`
	KVLinearizable  string  `json:"kv_linearizable"` // true, false, inconclusive, or not recorded (-agents)
	KVOrderProblems int     `json:"kv_revision_order_problems"`
	KVCheckMS       float64 `json:"kv_check_ms"`
	// Of the writes of unknown outcome, those the stream's record settled
	// (shown to have had no effect, or to have taken effect at a revision)
	// and those it bounded (shown to have taken effect, if at all, before a
	// later write returned); and the revisions the record misses (checkKV,
	// kvcheck.Resolve).
	KVUnknown    int `json:"kv_unknown_outcomes"`
	KVSettled    int `json:"kv_unknown_settled"`
	KVBounded    int `json:"kv_unknown_bounded"`
	KVRecordGaps int `json:"kv_record_gaps"`
	// KVUnexplained counts entries of the stream that no recorded write can
	// have made (at most 20).
	KVUnexplained int      `json:"kv_unexplained_entries"`
	KVProblems    []string `json:"kv_problems,omitempty"`
	KVPage        string   `json:"kv_page,omitempty"`

	ColdStartMS  float64           `json:"cold_start_ms"`
	LeaderlessMS float64           `json:"leaderless_ms"`
	Scenarios    []*scenarioReport `json:"scenarios"`
	Crashed      []string          `json:"crashed"`

	// A fleet run's daemons per node at the end, before shutdown.
	FinalLoads  map[string]int `json:"final_loads,omitempty"`
	FinalSpread int            `json:"final_spread"`

	// An -agents run's, from the actors' records: the daemons of a
	// SIGKILLed agent gone later than the loss margin after the kill, those
	// of an agent paused past its work deadline (counted from the pause)
	// still alive when it resumed, the actors still running once every
	// agent had exited, the acts accepted that the fence's log lacks and
	// those it refused as stale; and the shortest time from a daemon's run
	// ending on one node to its next starting on another, over so many
	// handovers.
	LossMarginMS      float64 `json:"loss_margin_ms,omitempty"`
	WorkDeadlineMS    float64 `json:"work_deadline_ms,omitempty"`
	KillLate          int     `json:"daemons_late_after_kill"`
	PauseSurvivors    int     `json:"daemons_alive_past_work_deadline"`
	Leftovers         int     `json:"daemons_outliving_agents"`
	ActsMissing       int     `json:"accepted_acts_missing_from_fence"`
	ActsRefused       int     `json:"acts_refused_stale"`
	ClosestHandoverMS float64 `json:"closest_handover_ms"`
	Handovers         int     `json:"handovers"`
	// ClosestExitMS is the same from the harness's sight of an actor's
	// end (its connection closing, after the process exited), a second
	// opinion: reported, not an invariant.
	ClosestExitMS float64 `json:"closest_handover_from_exit_ms"`

	Problems []string `json:"problems"`

	terms    []*term
	marks    []mark
	overlaps []span
	hist     *history
	deaths   map[string]int64
	runStart int64
	runEnd   int64
}

// mode describes the run: servers, TTL, processes and rounds.
func (r *report) mode() string {
	servers := "single server"
	switch {
	case r.Cluster:
		servers = "3-node cluster, R3 bucket"
	case r.Topology == "supercluster":
		servers = "supercluster of 3 regions (one server each) joined by gateways, R1 bucket in C1, workers spread over the regions"
	case r.Topology == "leaf":
		servers = "hub (domain hub) and leaf node (domain leaf), R1 bucket in the hub's domain, workers alternately on the hub and the leaf"
	}
	if r.SyncAlways {
		servers += ", fsync before each ack"
	} else {
		servers += ", lazy fsync"
	}
	if r.Agents {
		return fmt.Sprintf("%s, TTL %v, a fleet of %d election agents and %d forking daemons, %d round(s)", servers, r.TTL, r.Workers, r.Daemons, r.Rounds)
	}
	if r.Fleet {
		return fmt.Sprintf("%s, TTL %v, a fleet of %d nodes and %d daemons, %d round(s)", servers, r.TTL, r.Workers, r.Daemons, r.Rounds)
	}
	return fmt.Sprintf("%s, TTL %v, %d workers, %d round(s)", servers, r.TTL, r.Workers, r.Rounds)
}

// scenarioReport is what the checker found for one scenario.
type scenarioReport struct {
	Name       string `json:"name"`
	Faults     int    `json:"faults"`
	Failovers  int    `json:"failovers"`
	FailoverMS stats  `json:"failover_ms"`
	samples    []float64
	// HandoverMS: from the return of the work of the leader the fault aimed
	// at to the next leader's won (single-key runs).
	HandoverMS stats `json:"handover_from_return_ms"`
	// windows: each fault, and when its window ends at the latest.
	windows []faultWindow

	// A fleet run's, from each fault to the next: the longest any daemon
	// ran nowhere, the daemons started, and the daemons that ended on
	// another node than they began on.
	UnplacedMS stats `json:"unplaced_ms"`
	Starts     int   `json:"daemon_starts,omitempty"`
	Changed    int   `json:"daemons_moved,omitempty"`
	unplaced   []float64

	// An -agents run's: for each daemon of the agent the fault killed,
	// stopped or paused, the time from that signal until its actor was
	// gone.
	GoneMS stats `json:"target_daemons_gone_ms"`
	gone   []float64
}

// stats summarizes samples in milliseconds.
type stats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// mark is a fault on the timeline.
type mark struct {
	at    int64
	label string
}

// summarize returns the count, median, 99th percentile and maximum of
// samples.
func summarize(samples []float64) stats {
	if len(samples) == 0 {
		return stats{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	pick := func(q float64) float64 {
		return round(s[int(math.Ceil(q*float64(len(s))))-1])
	}
	return stats{N: len(s), P50: pick(0.5), P99: pick(0.99), Max: round(s[len(s)-1])}
}

// round rounds v to one decimal.
func round(v float64) float64 { return math.Round(v*10) / 10 }

// printFleetScenarios writes a fleet run's table: per scenario, the time
// to the first daemon started after the fault, the longest any daemon ran
// nowhere until the next fault, the daemons started and those that ended
// on another node; in an -agents run also how long the daemons of the
// agent killed, stopped or paused lived on after the signal.
func (r *report) printFleetScenarios(tw io.Writer) {
	gone := func(*scenarioReport) string { return "" }
	header := "scenario\tfaults\tfirst start p50 ms\tunplaced p50 ms\tunplaced max ms\tmax ×TTL\tstarts\tmoved\t"
	if r.Agents {
		header += "its daemons gone: n\tp50 ms\tmax ms\t"
		gone = func(s *scenarioReport) string {
			if s.GoneMS.N == 0 {
				return "0\t\t\t"
			}
			return fmt.Sprintf("%d\t%.0f\t%.0f\t", s.GoneMS.N, s.GoneMS.P50, s.GoneMS.Max)
		}
	}
	fmt.Fprintln(tw, header)
	for _, s := range r.Scenarios {
		u := s.UnplacedMS
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.2f\t%d\t%d\t%s\n", s.Name, s.Faults, s.FailoverMS.P50, u.P50, u.Max, u.Max/r.TTLMS, s.Starts, s.Changed, gone(s))
	}
}

// loadsText lists daemons per node, by node name.
func loadsText(loads map[string]int) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(loads)) {
		parts = append(parts, fmt.Sprintf("%s %d", name, loads[name]))
	}
	return strings.Join(parts, ", ")
}

// ok reports whether every invariant held.
func (r *report) ok() bool {
	return r.SplitBrainMS == 0 && r.WorkOverlaps == 0 && r.StaleTokensAccepted == 0 && r.DemotionViolations == 0 &&
		r.DuplicateTokens == 0 && r.TokenRegressions == 0 && r.UnbackedWins == 0 && r.UnvalidatedWins == 0 &&
		r.QuorumLossLeaders == 0 && r.CutLeaders == 0 && len(r.Crashed) == 0 && !r.FenceUnread && r.historyOK() &&
		(!r.Fleet || r.FinalSpread <= 1) && r.agentsOK() && r.kvOK() && (r.ReplicasAgree == nil || *r.ReplicasAgree)
}

// kvOK reports whether the recorded writes were found linearizable, with
// their revisions in order. A check that ran out of time ("inconclusive")
// fails the run as "false" does: it is not a pass. A run that records no
// writes (-agents) is not judged by it.
func (r *report) kvOK() bool {
	return (r.KVLinearizable == "true" || r.KVLinearizable == kvNotRecorded) && r.KVOrderProblems == 0 && r.KVUnexplained == 0
}

// kvNotRecorded is the verdict of a run whose KV calls are not recorded:
// -agents, whose agents are the election binary itself.
const kvNotRecorded = "not recorded"

// agentsOK reports whether the invariants only an -agents run checks
// held: they are zero in other runs.
func (r *report) agentsOK() bool {
	return r.KillLate == 0 && r.PauseSurvivors == 0 && r.Leftovers == 0 && r.ActsMissing == 0
}

// historyOK reports whether the leadership history matched the workers'
// records.
func (r *report) historyOK() bool {
	return r.HistoryMissing == 0 && r.HistoryDuplicated == 0 && r.HistoryUnknown == 0 && !r.HistoryUnread
}

// printAgents writes the lines of an -agents run's own invariants.
func (r *report) printAgents(w io.Writer, verdict func(bool) string) {
	fmt.Fprintf(w, "daemon on two nodes (actors' own records, first to last)  %.1f ms in %d episodes  %s\n",
		r.SplitBrainMS, r.SplitBrainEpisodes, verdict(r.SplitBrainMS == 0))
	fmt.Fprintf(w, "closest handover (a run's last record → the next run's first, on another node): %.1f ms over %d handovers; from the actor's exit as the harness saw it %.1f ms (reported)\n",
		r.ClosestHandoverMS, r.Handovers, r.ClosestExitMS)
	fmt.Fprintf(w, "daemons of SIGKILLed agents gone later than the loss margin (%.0f ms): %d  %s\n",
		r.LossMarginMS, r.KillLate, verdict(r.KillLate == 0))
	fmt.Fprintf(w, "daemons of agents paused past the work deadline (%.0f ms) alive at the resume: %d  %s\n",
		r.WorkDeadlineMS, r.PauseSurvivors, verdict(r.PauseSurvivors == 0))
	fmt.Fprintf(w, "daemons still running once every agent had exited: %d  %s\n", r.Leftovers, verdict(r.Leftovers == 0))
	fmt.Fprintf(w, "acts the actors saw accepted missing from the fence's log: %d  %s; acts refused as stale: %d (reported)\n",
		r.ActsMissing, verdict(r.ActsMissing == 0), r.ActsRefused)
}

// print writes the readable table, and with -json the summary as the last line.
func (r *report) print(w io.Writer, cfg config) {
	r.TTLMS = ms(int64(r.TTL))
	r.SplitBrainMS, r.SplitBrainRawMS = round(r.SplitBrainMS), round(r.SplitBrainRawMS)
	r.ColdStartMS, r.LeaderlessMS, r.RunMS = round(r.ColdStartMS), round(r.LeaderlessMS), round(r.RunMS)
	fmt.Fprintf(w, "chaos: %s, %.1f s, seed %d\n\n", r.mode(), r.RunMS/1000, r.Seed)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if r.Fleet {
		r.printFleetScenarios(tw)
	} else {
		fmt.Fprintln(tw, "scenario\tfaults\tfailovers\tp50 ms\tp99 ms\tmax ms\tmax ×TTL\tfrom work's return: n\tp50 ms\tp99 ms\tmax ms\t")
		for _, s := range r.Scenarios {
			f, h := s.FailoverMS, s.HandoverMS
			handover := "0\t\t\t\t"
			if h.N > 0 {
				handover = fmt.Sprintf("%d\t%.0f\t%.0f\t%.0f\t", h.N, h.P50, h.P99, h.Max)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.2f\t%s\n", s.Name, s.Faults, s.Failovers, f.P50, f.P99, f.Max, f.Max/r.TTLMS, handover)
		}
	}
	tw.Flush()

	verdict := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "BROKEN"
	}
	if r.Fleet {
		fmt.Fprintf(w, "\nfaults injected %d, daemon runs %d, cold start → every daemon running %.0f ms, daemons unplaced %.0f ms in all (of %.0f ms × %d daemons)\n",
			r.Faults, r.Elections, r.ColdStartMS, r.LeaderlessMS, r.RunMS, r.Daemons)
	} else {
		fmt.Fprintf(w, "\nfaults injected %d, elections %d, cold start → first leader %.0f ms, leaderless %.0f ms of %.0f ms\n",
			r.Faults, r.Elections, r.ColdStartMS, r.LeaderlessMS, r.RunMS)
	}
	if rt := r.RoundTrip; rt.N > 0 {
		fmt.Fprintf(w, "KV call, send → reply, outside faults: p50 %.1f, p99 %.1f, max %.1f ms (%d calls)\n", rt.P50, rt.P99, rt.Max, rt.N)
	}
	if r.ReplicasAgree != nil {
		fmt.Fprintf(w, "replicas of the bucket's stream agree after the run: %v  %s\n", *r.ReplicasAgree, verdict(*r.ReplicasAgree))
	}
	if r.KVLinearizable != kvNotRecorded {
		fmt.Fprintf(w, "KV writes linearizable (Porcupine, one key with revisions): %s over %d writes in %.0f ms; revision-order problems %d  %s\n",
			r.KVLinearizable, r.KVOps, r.KVCheckMS, r.KVOrderProblems, verdict(r.kvOK()))
		fmt.Fprintf(w, "  writes of unknown outcome %d: settled by the stream's record %d, bounded by it %d; revisions the record misses %d; entries no recorded write made %d\n",
			r.KVUnknown, r.KVSettled, r.KVBounded, r.KVRecordGaps, r.KVUnexplained)
		for _, p := range r.KVProblems {
			fmt.Fprintf(w, "  %s\n", p)
		}
		if r.KVPage != "" {
			fmt.Fprintf(w, "  the history, drawn: %s\n", r.KVPage)
		}
	}
	twice := "split brain"
	if r.Fleet {
		twice = "daemon on two nodes"
		fmt.Fprintf(w, "daemons per node at the end: %s; spread %d  %s\n", loadsText(r.FinalLoads), r.FinalSpread, verdict(r.FinalSpread <= 1))
	}
	if r.Agents {
		r.printAgents(w, verdict)
	} else {
		fmt.Fprintf(w, "%s (pause-adjusted)  %8.1f ms in %d episodes  %s\n", twice, r.SplitBrainMS, r.SplitBrainEpisodes, verdict(r.SplitBrainMS == 0))
		fmt.Fprintf(w, "%s (raw, with pauses) %7.1f ms  (reported, not an invariant)\n", twice, r.SplitBrainRawMS)
		returned := fmt.Sprintf("OnWon returned, up to %.0f ms after the context ended", r.StopDelayMS)
		if r.Fleet {
			returned = "the daemon's Run returned"
		}
		fmt.Fprintf(w, "work overlap (won → %s, a killed worker's ending at its death)  %.1f ms in %d pairs  %s; works of workers stopped past their validity, counted until a TTL after their last write: %d (reported)\n",
			returned, round(r.WorkOverlapMS), r.WorkOverlaps, verdict(r.WorkOverlaps == 0), r.WorksCut)
		fmt.Fprintf(w, "self-demotion (stand-down − last good renewal sent)  p50 %.0f, p99 %.0f, max %.0f ms; bound %.0f ms  %s\n",
			r.SelfDemotion.P50, r.SelfDemotion.P99, r.SelfDemotion.Max, r.DemotionBoundMS, verdict(r.DemotionViolations == 0))
	}
	fmt.Fprintf(w, "tokens: %d duplicated, %d regressions, %d wins not in the log (%d not audited), %d without a write  %s\n",
		r.DuplicateTokens, r.TokenRegressions, r.UnbackedWins, r.UnauditedWins, r.UnvalidatedWins,
		verdict(r.DuplicateTokens == 0 && r.TokenRegressions == 0 && r.UnbackedWins == 0 && r.UnvalidatedWins == 0))
	fmt.Fprintf(w, "fenced acts: %d accepted, %d stale tokens accepted  %s; unfenced overlaps %d (reported)\n",
		r.ActsAccepted, r.StaleTokensAccepted, verdict(r.StaleTokensAccepted == 0 && !r.FenceUnread), r.UnfencedOverlaps)
	if r.Cluster {
		fmt.Fprintf(w, "leaders announced during quorum loss: %d  %s\n", r.QuorumLossLeaders, verdict(r.QuorumLossLeaders == 0))
	}
	if r.Topology != "" {
		fmt.Fprintf(w, "leaders announced out of the bucket's reach (a win's write sent across a region cut, or while the bucket's server was down): %d  %s\n", r.CutLeaders, verdict(r.CutLeaders == 0))
	}
	if r.hist != nil && r.hist.leadership != nil {
		fmt.Fprintf(w, "leadership history: %d wins recorded, %d missing (%d more killed, or refused by JetStream, within 1 s of winning), %d duplicated, %d unknown  %s\n",
			r.HistoryWins, r.HistoryMissing, r.HistoryExcused, r.HistoryDuplicated, r.HistoryUnknown, verdict(r.historyOK()))
	}
	workers := "workers"
	if r.Agents {
		workers = "agents"
	}
	fmt.Fprintf(w, "%s crashed or hung: %d  %s\n", workers, len(r.Crashed), verdict(len(r.Crashed) == 0))
	for _, c := range r.Crashed {
		fmt.Fprintln(w, "  ", c)
	}
	for _, p := range r.Problems {
		fmt.Fprintln(w, "  problem:", p)
	}
	if cfg.json {
		b, _ := json.Marshal(r)
		fmt.Fprintln(w, string(b))
	}
}
