//go:build unix

package check

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
	lhistory "github.com/kvelect/election/history"
)

// checkTokens checks that every token was announced once, that tokens grow
// from term to term, and that the audit log holds the winner's value at each
// token's revision.
func checkTokens(rep *Report, terms []*term, audit []record.Event) {
	byRev := map[uint64]record.Event{}
	for _, a := range audit {
		byRev[a.Rev] = a
	}
	seen := map[uint64]string{}
	var prev uint64
	for _, t := range terms {
		if other, dup := seen[t.token]; dup {
			rep.DuplicateTokens++
			rep.Problems = append(rep.Problems, fmt.Sprintf("token %d%s announced by %s and %s", t.token, about(t.daemon), other, t.worker))
		}
		seen[t.token] = t.worker
		if t.token <= prev {
			rep.TokenRegressions++
		}
		prev = t.token
		a, ok := byRev[t.token]
		switch {
		case !ok:
			rep.UnauditedWins++
		case a.Op != "PUT" || a.Worker != t.worker:
			rep.UnbackedWins++
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s announced token %d%s, but the log holds %s %q there", t.worker, t.token, about(t.daemon), a.Op, a.Worker))
		}
	}
}

// checkFence counts stale tokens the fenced resource accepted, and acts made
// with a token older than one another worker had already acted with, each
// daemon on its own subject.
func checkFence(rep *Report, hist *history) {
	highest := map[string]uint64{} // by daemon
	for _, f := range hist.fence {
		switch f.Kind {
		case "fence":
			rep.ActsAccepted++
			if f.Token < highest[f.Daemon] {
				rep.StaleTokensAccepted++
			}
			highest[f.Daemon] = max(highest[f.Daemon], f.Token)
		case "fence-error":
			rep.Problems = append(rep.Problems, "reading the fenced resource: "+f.Err)
			rep.FenceUnread = true
		}
	}
	acts := map[string][]record.Event{} // by daemon
	for _, events := range hist.workers {
		for _, ev := range events {
			if ev.Kind == "act" {
				acts[ev.Daemon] = append(acts[ev.Daemon], ev)
			}
		}
	}
	for _, acts := range acts {
		sort.Slice(acts, func(i, j int) bool { return acts[i].Sent < acts[j].Sent })
		for i, a := range acts {
			for _, b := range acts[:i] {
				if b.Token > a.Token && b.T < a.Sent {
					rep.UnfencedOverlaps++
					break
				}
			}
		}
	}
}

// recordGrace is how long after its win a killed worker may have had no
// time to send the win's record: it is sent in the background.
const recordGrace = int64(time.Second)

// checkLeadership compares the bucket's leadership history with the
// workers' own records: every win recorded once, except one whose worker
// was killed within recordGrace of it; or whose acts sent within
// recordGrace of it JetStream refused as temporarily unavailable (err_code
// 10008, as after quorum loss), or that failed otherwise when the worker
// was killed before the record's first attempt (one KV call's timeout, at
// most the campaign interval) and a retry could end, or was stopped or
// killed before any write of its own got through after the win: the
// record, a best-effort write sent at the win and given up a KV call's
// timeout after a stop, met the same. No win or stand-down recorded twice;
// nothing recorded that no worker did.
func checkLeadership(rep *Report, hist *history, deaths map[string]int64, ttl time.Duration) {
	if hist.leadership == nil {
		return
	}
	type leadership struct {
		worker string
		token  uint64
	}
	recorded := map[string]map[leadership]int{}
	for _, ev := range hist.leadership {
		switch {
		case ev.Kind == "leadership-error":
			rep.Problems = append(rep.Problems, "reading the leadership history: "+ev.Err)
			rep.HistoryUnread = true
		case strings.HasPrefix(ev.Kind, "recorded-"):
			kind := strings.TrimPrefix(ev.Kind, "recorded-")
			if recorded[kind] == nil {
				recorded[kind] = map[leadership]int{}
			}
			recorded[kind][leadership{ev.Target, ev.Token}]++
		}
	}
	wins, lost := map[leadership]int64{}, map[leadership]bool{}
	unavailable := map[leadership]bool{} // JetStream refused the winner's acts right after its win
	failing := map[leadership]bool{}     // the winner's acts right after its win failed otherwise
	for name, events := range hist.workers {
		for _, ev := range events {
			l := leadership{name, ev.Token}
			switch ev.Kind {
			case "won":
				wins[l] = ev.T
			case "lost":
				lost[l] = true
			case "act":
				switch {
				case ev.Err == "" || ev.Sent-wins[l] >= recordGrace:
				case strings.Contains(ev.Err, "err_code=10008"):
					unavailable[l] = true
				default:
					failing[l] = true
				}
			}
		}
	}
	ends := map[string]int64{} // when each worker was stopped or killed
	for _, ev := range hist.harness {
		if (ev.Kind == "stop" || ev.Kind == "kill") && ends[ev.Target] == 0 {
			ends[ev.Target] = ev.T
		}
	}
	// answered reports whether a write of worker's got through between
	// from and to.
	answered := func(worker string, from, to int64) bool {
		for _, ev := range hist.workers[worker] {
			if ev.Kind == "act" && ev.Accepted && ev.T >= from && ev.T <= to {
				return true
			}
		}
		return false
	}
	for l, at := range wins {
		end := ends[l.worker]
		switch {
		case recorded[lhistory.Won][l] > 0:
			rep.HistoryWins++
		case deaths[l.worker] != 0 && deaths[l.worker]-at < recordGrace, unavailable[l],
			failing[l] && deaths[l.worker] != 0 && deaths[l.worker]-at < int64(ttl*3/4)+recordGrace,
			failing[l] && end != 0 && !answered(l.worker, at, end):
			rep.HistoryExcused++
		default:
			rep.HistoryMissing++
			rep.Problems = append(rep.Problems, fmt.Sprintf("the leadership history lacks the win of %s with token %d", l.worker, l.token))
		}
	}
	for kind, counts := range recorded {
		for l, n := range counts {
			rep.HistoryDuplicated += n - 1
			if kind == lhistory.Won && wins[l] == 0 || kind == lhistory.StoodDown && !lost[l] {
				rep.HistoryUnknown++
				rep.Problems = append(rep.Problems, fmt.Sprintf("the leadership history records %s %s with token %d, which no worker did", l.worker, kind, l.token))
			}
		}
	}
}

// checkScenarios measures, for each fault, the time to the next announced
// leader before the next fault or the next scenario's preparation (a
// leadership moved on purpose, leadFrom, is no failover of the fault
// before), and counts announcements during quorum loss (not during the
// outage of a minority of the servers).
func checkScenarios(rep *Report, harness []record.Event, terms []*term) {
	byName := map[string]*ScenarioReport{}
	var faults []record.Event
	var bounds []int64 // when each fault's window ends at the latest: faults and preparations
	var outage int64
	quorumLost := false
	for _, ev := range harness {
		switch ev.Kind {
		case "fault":
			faults = append(faults, ev)
			bounds = append(bounds, ev.T)
		case "prepare":
			bounds = append(bounds, ev.T)
		case "outage-start":
			// The target is how many of the cluster's three servers are
			// down: one leaves a quorum, under which new leaders are due.
			down, _ := strconv.Atoi(ev.Target)
			outage, quorumLost = ev.T, down > 1
		case "outage-end":
			if !quorumLost {
				continue
			}
			for _, t := range terms {
				if t.start > outage && t.start < ev.T {
					rep.QuorumLossLeaders++
				}
			}
		}
	}
	rep.Faults = len(faults)
	for _, f := range faults {
		sr := byName[f.Scenario]
		if sr == nil {
			sr = &ScenarioReport{Name: f.Scenario}
			byName[f.Scenario] = sr
			rep.Scenarios = append(rep.Scenarios, sr)
		}
		sr.Faults++
		rep.Timeline.Faults = append(rep.Timeline.Faults, Mark{At: f.T, Label: f.Scenario})
		until := int64(1<<63 - 1)
		if j, _ := slices.BinarySearch(bounds, f.T+1); j < len(bounds) {
			until = bounds[j]
		}
		sr.windows = append(sr.windows, faultWindow{f, until})
		for _, t := range terms {
			if t.start > f.T && t.start < until {
				sr.samples = append(sr.samples, ms(t.start-f.T))
				break
			}
		}
	}
	for _, sr := range rep.Scenarios {
		sr.Failovers = len(sr.samples)
		sr.FailoverMS = summarize(sr.samples)
	}
}

// checkRoundTrips measures the workers' KV calls made and answered outside
// every fault window (fault to heal): how long the server, the proxies and the
// scheduler take to answer one call here, the unit every failover figure is
// made of. A graceful handover, for one, is two calls and one push. A fault
// can outlast its heal (a reconnection, a cluster's stream-leader election),
// so in a run of every scenario a few calls right after a heal take hundreds
// of milliseconds; in a run of leader-stop alone there is no such aftermath.
// A call that spans a pause of its own worker (SIGSTOP, by a fault or to
// move the leadership before one, leadFrom) does not count either.
func checkRoundTrips(rep *Report, hist *history, pauses map[string][]span) {
	var faults []span
	var from int64
	for _, ev := range hist.harness {
		switch ev.Kind {
		case "fault":
			from = ev.T
		case "heal":
			faults = append(faults, span{from, ev.T})
		}
	}
	var samples []float64
	for name, events := range hist.workers {
		for _, ev := range events {
			if ev.Kind != "op" || ev.Outcome == "error" || coveredWithin(faults, ev.Sent, ev.T) > 0 || coveredWithin(pauses[name], ev.Sent, ev.T) > 0 {
				continue
			}
			samples = append(samples, ms(ev.T-ev.Sent))
		}
	}
	rep.RoundTrip = summarize(samples)
}

// checkFleet measures, for each fault of a fleet run until the next one,
// how long the worst-off daemon went unplaced (not running anywhere), how
// many daemons started, and how many ended on another node than they began
// on (the moves the fault made necessary); and the spread of daemons over
// the nodes when the run ended, before shutdown.
func checkFleet(rep *Report, harness []record.Event, perDaemon map[string][]*term, runEnd int64) {
	var faults []record.Event
	end := runEnd
	gone := map[string]int64{}
	for _, ev := range harness {
		switch ev.Kind {
		case "fault":
			faults = append(faults, ev)
		case "shutdown":
			end = ev.T
		case "stop", "kill", "exit":
			if _, seen := gone[ev.Target]; !seen {
				gone[ev.Target] = ev.T
			}
		}
	}
	holder := func(terms []*term, at int64) string {
		for _, t := range terms {
			if t.start <= at && at < t.observed {
				return t.worker
			}
		}
		return ""
	}
	byName := map[string]*ScenarioReport{}
	for _, sr := range rep.Scenarios {
		byName[sr.Name] = sr
	}
	for i, f := range faults {
		until := end
		if i+1 < len(faults) {
			until = faults[i+1].T
		}
		sr := byName[f.Scenario]
		var worst int64
		for _, terms := range perDaemon {
			for _, t := range terms {
				if t.start > f.T && t.start < until {
					sr.Starts++
				}
			}
			worst = max(worst, until-f.T-coveredBy(terms, f.T, until))
			if holder(terms, f.T) != holder(terms, until-1) {
				sr.Changed++
			}
		}
		sr.unplaced = append(sr.unplaced, ms(worst))
	}
	for _, sr := range rep.Scenarios {
		sr.UnplacedMS = summarize(sr.unplaced)
	}

	load := map[string]int{}
	for name, joined := range joins(rep.hist) {
		if at, left := gone[name]; joined < end && (!left || at > end) {
			load[name] = 0
		}
	}
	for _, terms := range perDaemon {
		if h := holder(terms, end-1); h != "" {
			load[h]++
		}
	}
	rep.FinalLoads = load
	rep.FinalSpread = Spread(load)

	// Unplaced time counts until shutdown, when every node leaves.
	rep.LeaderlessMS = 0
	for _, terms := range perDaemon {
		rep.LeaderlessMS += ms(end - terms[0].start - coveredBy(terms, terms[0].start, end))
	}
}

// coveredBy returns how much of [from, to] the terms' adjusted spans cover.
func coveredBy(terms []*term, from, to int64) int64 {
	var covered []span
	for _, t := range terms {
		for _, s := range t.adjusted {
			if lo, hi := max(s.from, from), min(s.to, to); hi > lo {
				covered = append(covered, span{lo, hi})
			}
		}
	}
	return unionSpans(covered)
}

// cut is a region cut off from the others (or its server down) in
// -supercluster or -leaf, from the fault in place to the heal.
type cut struct {
	region, how string
	from, to    int64
}

// checkCuts counts the wins that no write could have backed: in
// -supercluster and -leaf, a worker reaches the bucket only through its own
// region's server and the links from there to the bucket's home region. So
// while a region is cut off, a worker on the side of the cut without the
// home region cannot win (a remote region's workers when it is cut off,
// every other region's when the home region is), and while the home server
// is down nobody can. A win counts when it came within the cut and the
// write it rests on was sent after the cut was in place.
func checkCuts(rep *Report, harness []record.Event, terms []*term, runEnd int64) {
	home, regions, cuts := "", map[string]string{}, []cut(nil)
	open := map[string]int{} // index in cuts, by region
	for _, ev := range harness {
		switch ev.Kind {
		case "topology":
			home = ev.Target
		case "spawn":
			regions[ev.Target] = ev.Region
		case "region-cut":
			open[ev.Target] = len(cuts)
			cuts = append(cuts, cut{region: ev.Target, how: ev.Cause, from: ev.T, to: runEnd})
		case "region-heal":
			if i, ok := open[ev.Target]; ok {
				cuts[i].to = ev.T
				delete(open, ev.Target)
			}
		}
	}
	for _, t := range terms {
		for _, c := range cuts {
			if t.start <= c.from || t.start >= c.to || t.backed <= c.from || reachable(regions[t.worker], home, c) {
				continue
			}
			rep.CutLeaders++
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s (region %s) announced token %d%s, its write sent %.0f ms into a cut of %s (%s), out of the reach of the bucket in %s",
				t.worker, regions[t.worker], t.token, about(t.daemon), ms(t.backed-c.from), c.region, c.how, home))
		}
	}
}

// reachable reports whether a worker of region can reach the bucket in
// home during c.
func reachable(region, home string, c cut) bool {
	if c.how == "down" && c.region == home {
		return false
	}
	return (region == c.region) == (home == c.region)
}

// Spread returns max − min of the loads (0 for none).
func Spread(load map[string]int) int {
	if len(load) == 0 {
		return 0
	}
	lo, hi := math.MaxInt, 0
	for _, n := range load {
		lo, hi = min(lo, n), max(hi, n)
	}
	return hi - lo
}
