//go:build unix

package check

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/fleet"
)

// actorRun is one actor process of an -agents run: one run of a daemon on
// a node, from its first record to its last, or to the send of its last
// append the fence holds if that came later (an actor killed while it
// appended). Pausing an agent does not pause its daemons, so nothing is
// subtracted for pauses.
type actorRun struct {
	node   string
	daemon string
	pid    int
	token  uint64
	start  int64
	end    int64
	gone   int64 // when the harness saw the actor's connection close; 0 if it never did
	events []record.Event
}

// actorKey names an actor across the records: its daemon, node and
// process ID.
type actorKey struct {
	daemon, node string
	pid          int
}

// loadActors reads the actors' records of an -agents run, one file per
// actor, and adds each actor's events to its node's in h.workers.
func loadActors(dir string, h *history) error {
	files, err := filepath.Glob(filepath.Join(dir, "actor-*.jsonl"))
	if err != nil {
		return err
	}
	for _, f := range files {
		events, err := record.Read(f)
		if err != nil {
			return err
		}
		if len(events) == 0 {
			continue
		}
		h.actors = append(h.actors, events)
		node := events[0].Worker
		h.workers[node] = append(h.workers[node], events...)
	}
	for _, events := range h.workers {
		sort.SliceStable(events, func(i, j int) bool { return events[i].T < events[j].T })
	}
	return nil
}

// actorRuns returns the actors' runs, in order of start, with the sends
// of their appends the fence holds and the times their connections
// closed.
func actorRuns(hist *history) []*actorRun {
	lastSent := map[actorKey]int64{}
	for _, f := range hist.fence {
		if f.Kind == "fence" && f.PID != 0 {
			k := actorKey{f.Daemon, f.Worker, f.PID}
			lastSent[k] = max(lastSent[k], f.Sent)
		}
	}
	gone := map[actorKey]int64{}
	for _, ev := range hist.harness {
		if ev.Kind == "actor-gone" {
			gone[actorKey{ev.Daemon, ev.Target, ev.PID}] = ev.T
		}
	}
	var runs []*actorRun
	for _, events := range hist.actors {
		first, last := events[0], events[len(events)-1]
		r := &actorRun{node: first.Worker, daemon: first.Daemon, pid: first.PID, token: first.Token,
			start: first.T, end: last.T, events: events}
		k := actorKey{r.daemon, r.node, r.pid}
		r.end = max(r.end, lastSent[k])
		r.gone = gone[k]
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
	return runs
}

// leaderDeadlines are how long after a leader's last good write it stands
// down (validity) and its work must have stopped (election.WorkDeadline),
// at the default interval of three quarters of the TTL, under the clock
// assumption of docs/design.md (rates within 5%, servers within 100 ms, a
// twentieth of the TTL below 2 s): stated here, not read from the library,
// so that a library with the rules broken fails the check. E is the
// earliest a server can age the write out; half the margin from the
// interval to E is the renewal window, then the work's time to stop.
func leaderDeadlines(ttl time.Duration) (validity, work time.Duration) {
	interval := ttl * 3 / 4
	earliest := time.Duration(float64(ttl-min(100*time.Millisecond, ttl/20)) / 1.05)
	return interval + (earliest-interval)/2, interval + (earliest-interval)*7/8
}

// checkAgentsRun computes the report of an -agents run from the actors'
// own records: a daemon's runs never overlap, its tokens grow and are
// backed by the bucket's log, the acts the fence accepted are in its log
// and none with a stale token, the daemons of a SIGKILLed agent die within
// the loss margin and those of a paused one at the work deadline, and no
// actor outlives the agents. Per fault it measures what a fleet run does.
func checkAgentsRun(p Params, hist *history) *Report {
	rep := &Report{TTL: p.TTL, Cluster: p.Cluster, SyncAlways: p.SyncAlways, Seed: p.Seed, Workers: p.Workers, Rounds: p.Rounds,
		Fleet: true, Agents: true, Daemons: p.Daemons, LossMarginMS: ms(int64(fleet.LossMargin(p.TTL)))}
	rep.KVLinearizable = KVNotRecorded // the agents are the election binary: their KV calls are not recorded
	runStart, runEnd, deaths, _ := readTimeline(rep, hist.harness)
	for _, ev := range hist.harness {
		switch ev.Kind {
		case "leftover":
			rep.Leftovers++
			rep.Problems = append(rep.Problems, fmt.Sprintf("daemon %s's actor (pid %d, token %d) of %s still ran once every agent had exited", ev.Daemon, ev.PID, ev.Token, ev.Target))
		case "leftover-error":
			rep.Leftovers++
			rep.Problems = append(rep.Problems, ev.Err)
		}
	}
	runs := actorRuns(hist)
	// The invariants take a run from its actor's first record to its last;
	// where the daemons ran, to the harness's sight of its end: a killed
	// actor died up to an act interval after its last record.
	var terms, placed []*term
	for _, r := range runs {
		terms = append(terms, &term{worker: r.node, daemon: r.daemon, token: r.token, start: r.start,
			end: r.end, observed: r.end, adjusted: []span{{r.start, r.end}}})
		end := max(r.end, r.gone)
		placed = append(placed, &term{worker: r.node, daemon: r.daemon, token: r.token, start: r.start,
			end: end, observed: end, adjusted: []span{{r.start, end}}})
	}
	perDaemon := byDaemonTerms(terms)
	rep.terms, rep.hist, rep.deaths, rep.runStart, rep.runEnd = terms, hist, deaths, runStart, runEnd
	rep.Elections = len(terms)
	rep.RunMS = ms(runEnd - runStart)

	var overlaps []span
	for _, terms := range perDaemon {
		o, episodes := overlap(terms, func(t *term) []span { return t.adjusted })
		overlaps = append(overlaps, o...)
		rep.SplitBrainEpisodes += episodes
		checkTokens(rep, holds(terms), hist.audit)
		if gap, ok := closestHandover(terms); ok && (rep.Handovers == 0 || ms(gap) < rep.ClosestHandoverMS) {
			rep.ClosestHandoverMS = ms(gap)
		}
		rep.Handovers += handovers(terms)
	}
	rep.SplitBrainMS, rep.overlaps = ms(total(overlaps)), overlaps
	rep.SplitBrainRawMS = rep.SplitBrainMS
	for i, terms := range slices.Collect(maps.Values(byDaemonTerms(placed))) {
		if gap, ok := closestHandover(terms); ok && (i == 0 || ms(gap) < rep.ClosestExitMS) {
			rep.ClosestExitMS = ms(gap)
		}
	}
	checkFence(rep, hist)
	checkFenceHoldsActs(rep, hist)
	checkScenarios(rep, hist.harness, terms)
	checkReplicaEvents(rep, hist.harness)
	for _, terms := range perDaemon {
		rep.ColdStartMS = max(rep.ColdStartMS, ms(terms[0].start-runStart))
	}
	checkFleet(rep, hist.harness, byDaemonTerms(placed), runEnd)
	checkAgentFaults(rep, hist.harness, runs, p.TTL)
	return rep
}

// holds merges a daemon's runs (in order of start) into the holds they
// ran under: an agent restarts a daemon that exited, or that its guard
// killed at the work deadline, under the same token if it still holds it.
func holds(runs []*term) []*term {
	var out []*term
	for _, t := range runs {
		if n := len(out); n > 0 && out[n-1].worker == t.worker && out[n-1].token == t.token {
			continue
		}
		out = append(out, t)
	}
	return out
}

// closestHandover returns the shortest time from a daemon's run on one
// node ending to its next run on another node starting (negative if they
// overlapped), given the daemon's runs in order of start.
func closestHandover(runs []*term) (int64, bool) {
	var closest int64
	found := false
	for i, t := range runs {
		for _, before := range runs[:i] {
			if before.worker == t.worker {
				continue
			}
			if gap := t.start - before.end; !found || gap < closest {
				closest, found = gap, true
			}
		}
	}
	return closest, found
}

// handovers counts a daemon's runs that followed one on another node.
func handovers(runs []*term) int {
	n := 0
	for i := 1; i < len(runs); i++ {
		if runs[i].worker != runs[i-1].worker {
			n++
		}
	}
	return n
}

// checkFenceHoldsActs counts the acts an actor recorded as accepted that
// the fence's log does not hold, unless the log could not be read, and the
// acts the fence refused as stale.
func checkFenceHoldsActs(rep *Report, hist *history) {
	type act struct {
		actorKey
		seq int
	}
	held := map[act]bool{}
	for _, f := range hist.fence {
		if f.Kind == "fence" {
			held[act{actorKey{f.Daemon, f.Worker, f.PID}, f.Seq}] = true
		}
	}
	for _, events := range hist.actors {
		pid := events[0].PID
		for _, ev := range events {
			switch {
			case ev.Kind != "act":
			case ev.Stale:
				rep.ActsRefused++
			case ev.Accepted && !rep.FenceUnread && !held[act{actorKey{ev.Daemon, ev.Worker, pid}, ev.Seq}]:
				rep.ActsMissing++
				if rep.ActsMissing <= 5 {
					rep.Problems = append(rep.Problems, fmt.Sprintf("%s's act %d with token %d of daemon %s was accepted, but the fence's log lacks it", ev.Worker, ev.Seq, ev.Token, ev.Daemon))
				}
			}
		}
	}
}

// checkAgentFaults measures, per fault, how long after the harness killed
// or stopped an agent each daemon it ran was gone, and after it paused one
// each daemon its guard killed before the resume; and counts the
// daemons of a SIGKILLed agent gone later than the loss margin, and those
// of an agent paused past its work deadline still alive when it resumed.
// An actor the harness never saw go counts as gone at the end of the run.
func checkAgentFaults(rep *Report, harness []record.Event, runs []*actorRun, ttl time.Duration) {
	byName := map[string]*ScenarioReport{}
	for _, sr := range rep.Scenarios {
		byName[sr.Name] = sr
	}
	end := rep.runEnd
	goneAt := func(r *actorRun) int64 {
		if r.gone == 0 {
			return end
		}
		return r.gone
	}
	// alive returns the runs of node alive at t.
	alive := func(node string, t int64) []*actorRun {
		var out []*actorRun
		for _, r := range runs {
			if r.node == node && r.start < t && goneAt(r) > t {
				out = append(out, r)
			}
		}
		return out
	}
	margin := int64(fleet.LossMargin(ttl))
	_, work := leaderDeadlines(ttl)
	deadline := int64(work)
	var cur *ScenarioReport
	paused := map[string]int64{}
	for _, ev := range harness {
		switch ev.Kind {
		case "fault":
			cur = byName[ev.Scenario]
		case "heal", "shutdown":
			cur = nil
		case "kill", "stop":
			for _, r := range alive(ev.Target, ev.T) {
				d := goneAt(r) - ev.T
				if cur != nil {
					cur.gone = append(cur.gone, ms(d))
				}
				if ev.Kind == "kill" && d > margin {
					rep.KillLate++
					rep.Problems = append(rep.Problems, fmt.Sprintf("daemon %s (token %d) ran %.0f ms after its agent %s was killed, past the loss margin", r.daemon, r.token, ms(d), r.node))
				}
			}
		case "guard-pause":
			// How long the daemon whose guard was stopped ran on.
			for _, r := range alive(ev.Target, ev.T) {
				if r.pid == ev.PID && cur != nil {
					cur.gone = append(cur.gone, ms(goneAt(r)-ev.T))
				}
			}
		case "pause":
			paused[ev.Target] = ev.T
		case "resume":
			from := paused[ev.Target]
			for _, r := range alive(ev.Target, from) {
				if cur != nil && goneAt(r) <= ev.T {
					cur.gone = append(cur.gone, ms(goneAt(r)-from))
				}
				if ev.T-from > deadline && goneAt(r) > ev.T {
					rep.PauseSurvivors++
					rep.Problems = append(rep.Problems, fmt.Sprintf("daemon %s (token %d) still ran when its agent %s resumed after %.0f ms, past the work deadline", r.daemon, r.token, r.node, ms(ev.T-from)))
				}
			}
		}
	}
	for _, sr := range rep.Scenarios {
		sr.GoneMS = summarize(sr.gone)
	}
	rep.WorkDeadlineMS = ms(deadline)
}

// joins returns when each node of a fleet run joined: a node's own
// record, or the harness's for an agent.
func joins(hist *history) map[string]int64 {
	out := map[string]int64{}
	for _, ev := range hist.harness {
		if _, seen := out[ev.Target]; ev.Kind == "joined" && !seen {
			out[ev.Target] = ev.T
		}
	}
	for name, events := range hist.workers {
		for _, ev := range events {
			if _, seen := out[name]; ev.Kind == "joined" && !seen {
				out[name] = ev.T
			}
		}
	}
	return out
}
