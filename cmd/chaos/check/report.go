//go:build unix

package check

import (
	"math"
	"slices"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
)

// Report is what the checker found in one run. Its exported fields are the
// JSON summary.
type Report struct {
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

	SelfDemotion       Stats   `json:"self_demotion_ms"`
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

	RoundTrip Stats `json:"kv_round_trip_ms"` // KV calls outside fault windows

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
	Scenarios    []*ScenarioReport `json:"scenarios"`
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

	// Timeline is what the run's timeline page draws.
	Timeline Timeline `json:"-"`
	// LeadershipRecorded: the run recorded the bucket's leadership history
	// (HistoryWins and the rest count).
	LeadershipRecorded bool `json:"-"`

	terms    []*term
	overlaps []span
	hist     *history
	deaths   map[string]int64
	runStart int64
	runEnd   int64
}

// Timeline is a run on the shared clock (CLOCK_MONOTONIC ns): every
// worker's events, its leaderships, the overlaps of two, and the faults.
type Timeline struct {
	Start, End int64
	Workers    map[string][]record.Event
	Deaths     map[string]int64 // when each killed worker died
	Terms      []Term
	Overlaps   []Span
	Faults     []Mark
}

// Term is one announced leadership of one worker: from its won event to
// when the worker recorded its end (Observed), the time it led (Adjusted:
// until its stand-down or validity deadline, less its pauses), and its
// pauses.
type Term struct {
	Worker           string
	Token            uint64
	Start, Observed  int64
	Adjusted, Paused []Span
}

// Span is a stretch of the run.
type Span struct{ From, To int64 }

// Mark is a fault, labelled with its scenario.
type Mark struct {
	At    int64
	Label string
}

// timeline fills r.Timeline and r.LeadershipRecorded from what the
// checker worked out.
func (r *Report) timeline() {
	spans := func(s []span) []Span {
		out := make([]Span, len(s))
		for i, x := range s {
			out[i] = Span{x.from, x.to}
		}
		return out
	}
	r.Timeline.Start, r.Timeline.End, r.Timeline.Deaths = r.runStart, r.runEnd, r.deaths
	r.Timeline.Workers = r.hist.workers
	r.Timeline.Overlaps = spans(r.overlaps)
	for _, t := range r.terms {
		r.Timeline.Terms = append(r.Timeline.Terms, Term{Worker: t.worker, Token: t.token, Start: t.start, Observed: t.observed,
			Adjusted: spans(t.adjusted), Paused: spans(t.paused)})
	}
	r.LeadershipRecorded = r.hist.leadership != nil
}

// ScenarioReport is what the checker found for one scenario.
type ScenarioReport struct {
	Name       string `json:"name"`
	Faults     int    `json:"faults"`
	Failovers  int    `json:"failovers"`
	FailoverMS Stats  `json:"failover_ms"`
	samples    []float64
	// HandoverMS: from the return of the work of the leader the fault aimed
	// at to the next leader's won (single-key runs).
	HandoverMS Stats `json:"handover_from_return_ms"`
	// windows: each fault, and when its window ends at the latest.
	windows []faultWindow

	// A fleet run's, from each fault to the next: the longest any daemon
	// ran nowhere, the daemons started, and the daemons that ended on
	// another node than they began on.
	UnplacedMS Stats `json:"unplaced_ms"`
	Starts     int   `json:"daemon_starts,omitempty"`
	Changed    int   `json:"daemons_moved,omitempty"`
	unplaced   []float64

	// An -agents run's: for each daemon of the agent the fault killed,
	// stopped or paused, the time from that signal until its actor was
	// gone.
	GoneMS Stats `json:"target_daemons_gone_ms"`
	gone   []float64
}

// Stats summarizes samples in milliseconds.
type Stats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// summarize returns the count, median, 99th percentile and maximum of
// samples.
func summarize(samples []float64) Stats {
	if len(samples) == 0 {
		return Stats{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	pick := func(q float64) float64 {
		return round(s[int(math.Ceil(q*float64(len(s))))-1])
	}
	return Stats{N: len(s), P50: pick(0.5), P99: pick(0.99), Max: round(s[len(s)-1])}
}

// round rounds v to one decimal.
func round(v float64) float64 { return math.Round(v*10) / 10 }

// OK reports whether every invariant held.
func (r *Report) OK() bool {
	return r.SplitBrainMS == 0 && r.WorkOverlaps == 0 && r.StaleTokensAccepted == 0 && r.DemotionViolations == 0 &&
		r.DuplicateTokens == 0 && r.TokenRegressions == 0 && r.UnbackedWins == 0 && r.UnvalidatedWins == 0 &&
		r.QuorumLossLeaders == 0 && r.CutLeaders == 0 && len(r.Crashed) == 0 && !r.FenceUnread && r.HistoryOK() &&
		(!r.Fleet || r.FinalSpread <= 1) && r.agentsOK() && r.KVOK() && (r.ReplicasAgree == nil || *r.ReplicasAgree)
}

// KVOK reports whether the recorded writes were found linearizable, with
// their revisions in order. A check that ran out of time ("inconclusive")
// fails the run as "false" does: it is not a pass. A run that records no
// writes (-agents) is not judged by it.
func (r *Report) KVOK() bool {
	return (r.KVLinearizable == "true" || r.KVLinearizable == KVNotRecorded) && r.KVOrderProblems == 0 && r.KVUnexplained == 0
}

// KVNotRecorded is the verdict of a run whose KV calls are not recorded:
// -agents, whose agents are the election binary itself.
const KVNotRecorded = "not recorded"

// agentsOK reports whether the invariants only an -agents run checks
// held: they are zero in other runs.
func (r *Report) agentsOK() bool {
	return r.KillLate == 0 && r.PauseSurvivors == 0 && r.Leftovers == 0 && r.ActsMissing == 0
}

// HistoryOK reports whether the leadership history matched the workers'
// records.
func (r *Report) HistoryOK() bool {
	return r.HistoryMissing == 0 && r.HistoryDuplicated == 0 && r.HistoryUnknown == 0 && !r.HistoryUnread
}
