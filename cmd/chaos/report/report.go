//go:build unix

// Package report presents what the checker found in a chaos run
// (check.Report): the readable table, the JSON summary and the HTML
// timeline.
package report

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

	"github.com/kvelect/election/cmd/chaos/check"
)

// mode describes the run: servers, TTL, processes and rounds.
func mode(r *check.Report) string {
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

// printFleetScenarios writes a fleet run's table: per scenario, the time
// to the first daemon started after the fault, the longest any daemon ran
// nowhere until the next fault, the daemons started and those that ended
// on another node; in an -agents run also how long the daemons of the
// agent killed, stopped or paused lived on after the signal.
func printFleetScenarios(tw io.Writer, r *check.Report) {
	gone := func(*check.ScenarioReport) string { return "" }
	header := "scenario\tfaults\tfirst start p50 ms\tunplaced p50 ms\tunplaced max ms\tmax ×TTL\tstarts\tmoved\t"
	if r.Agents {
		header += "its daemons gone: n\tp50 ms\tmax ms\t"
		gone = func(s *check.ScenarioReport) string {
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

// printAgents writes the lines of an -agents run's own invariants.
func printAgents(w io.Writer, r *check.Report, verdict func(bool) string) {
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

// Print writes the readable table of r, and with asJSON the summary as
// the last line.
func Print(w io.Writer, r *check.Report, asJSON bool) {
	r.TTLMS = float64(r.TTL) / float64(time.Millisecond)
	r.SplitBrainMS, r.SplitBrainRawMS = round(r.SplitBrainMS), round(r.SplitBrainRawMS)
	r.ColdStartMS, r.LeaderlessMS, r.RunMS = round(r.ColdStartMS), round(r.LeaderlessMS), round(r.RunMS)
	fmt.Fprintf(w, "chaos: %s, %.1f s, seed %d\n\n", mode(r), r.RunMS/1000, r.Seed)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if r.Fleet {
		printFleetScenarios(tw, r)
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
	if r.KVLinearizable != check.KVNotRecorded {
		fmt.Fprintf(w, "KV writes linearizable (Porcupine, one key with revisions): %s over %d writes in %.0f ms; revision-order problems %d  %s\n",
			r.KVLinearizable, r.KVOps, r.KVCheckMS, r.KVOrderProblems, verdict(r.KVOK()))
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
		printAgents(w, r, verdict)
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
	if r.LeadershipRecorded {
		fmt.Fprintf(w, "leadership history: %d wins recorded, %d missing (%d more killed, or refused by JetStream, within 1 s of winning), %d duplicated, %d unknown  %s\n",
			r.HistoryWins, r.HistoryMissing, r.HistoryExcused, r.HistoryDuplicated, r.HistoryUnknown, verdict(r.HistoryOK()))
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
	if asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintln(w, string(b))
	}
}

// round rounds v to one decimal, as the table shows it.
func round(v float64) float64 { return math.Round(v*10) / 10 }
