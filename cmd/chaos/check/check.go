//go:build unix

// Package check is the chaos harness's checker: a pure function of the
// files a run recorded (record.Event lines: the harness's, each worker's,
// the audit of the bucket's stream, the fence's log, the leadership
// history, an -agents run's actors) and of what the run was (Params). It
// finds split brain, late self-demotion, overlapping work, token and
// fencing violations, leaders across a cut, missing history, and KV writes
// that no linearizable order explains; it starts and signals nothing.
package check

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
	lhistory "github.com/kvelect/election/history"
)

// term is one announced leadership of one worker.
type term struct {
	worker   string
	daemon   string // in a fleet run; "" for the one key of a single-key run
	token    uint64
	start    int64  // won
	backed   int64  // send time of the acknowledged write the win rests on
	end      int64  // IsLeader turned false: the earlier of stand-down and the validity deadline
	observed int64  // when the worker recorded its stand-down, or died
	lastSent int64  // send time of its last acknowledged write
	standDn  bool   // ended by the worker's own stand-down, not a kill or the end of the run
	paused   []span // SIGSTOP windows of the worker
	adjusted []span // [start, end] minus paused windows
}

// span is a stretch of time, CLOCK_MONOTONIC ns from and to.
type span struct{ from, to int64 }

// history is everything one run recorded.
type history struct {
	harness []record.Event
	workers map[string][]record.Event
	audit   []record.Event
	fence   []record.Event
	// leadership is what the bucket's leadership history recorded; nil for
	// a run without one.
	leadership []record.Event
	// actors are the records of an -agents run's actors, one slice per
	// actor; each node's are in workers too.
	actors [][]record.Event
}

// loadHistory reads every history file of the run in dir.
func loadHistory(dir string) (*history, error) {
	h := &history{workers: map[string][]record.Event{}}
	var err error
	if h.harness, err = record.Read(filepath.Join(dir, "harness.jsonl")); err != nil {
		return nil, err
	}
	if h.audit, err = record.Read(filepath.Join(dir, "audit.jsonl")); err != nil {
		return nil, err
	}
	if h.fence, err = record.Read(filepath.Join(dir, "fence.jsonl")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if h.leadership, err = record.Read(filepath.Join(dir, "leadership.jsonl")); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "worker-*.jsonl"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		events, err := record.Read(f)
		if err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "worker-"), ".jsonl")
		h.workers[name] = events
	}
	if err := loadActors(dir, h); err != nil {
		return nil, err
	}
	return h, nil
}

// Params are what the checker knows of a run besides its files: its shape,
// which the report states, and its TTL, from which the rules follow.
type Params struct {
	TTL             time.Duration
	Workers, Rounds int
	Cluster         bool
	// Topology is "supercluster" or "leaf" in those modes, else "".
	Topology   string
	SyncAlways bool
	Seed       uint64
	// Fleet: the workers are a fleet's nodes running Daemons daemons;
	// Agents: election agents whose daemons' actors keep the records.
	Fleet   bool
	Agents  bool
	Daemons int
	// StopDelay is how long a worker's work went on after its leadership
	// context ended (a single-key run's).
	StopDelay time.Duration
	// PageDir is where a failed linearizability check draws its history
	// (kv-linearizability.html); "" for the run's directory.
	PageDir string
}

// Dir reads the histories a run recorded in dir and checks them: a pure
// function of those files and p.
func Dir(dir string, p Params) (*Report, error) {
	hist, err := loadHistory(dir)
	if err != nil {
		return nil, err
	}
	var rep *Report
	if p.Agents {
		rep = checkAgentsRun(p, hist)
	} else {
		rep = checkRun(p, hist, dir)
	}
	rep.timeline()
	return rep, nil
}

// checkRun checks the histories of a run of campaigners or of a fleet's
// nodes.
func checkRun(p Params, hist *history, dir string) *Report {
	// The checker states the rules it checks on its own, not through the
	// library's timing (leaderDeadlines), so that a library with the rules
	// broken fails it. A stand-down may come late by scheduling delay, up
	// to the work deadline, by when everything of the leadership must have
	// stopped.
	v, w := leaderDeadlines(p.TTL)
	validity, bound := int64(v), int64(w)
	rep := &Report{TTL: p.TTL, Cluster: p.Cluster, Topology: p.Topology, SyncAlways: p.SyncAlways, Seed: p.Seed, Workers: p.Workers, Rounds: p.Rounds}
	if p.Fleet {
		rep.Fleet, rep.Daemons = true, p.Daemons
	} else {
		rep.StopDelayMS = ms(int64(p.StopDelay))
	}

	runStart, runEnd, deaths, pauses := readTimeline(rep, hist.harness)

	var terms []*term
	for name, events := range hist.workers {
		for daemon, events := range byDaemon(events) {
			wt, problems := workerTerms(name, daemon, events, validity, deaths, runEnd, pauses[name])
			terms = append(terms, wt...)
			rep.Problems = append(rep.Problems, problems...)
			rep.UnvalidatedWins += len(problems)
		}
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i].start < terms[j].start })
	perDaemon := byDaemonTerms(terms)
	rep.terms, rep.hist, rep.deaths, rep.runStart, rep.runEnd = terms, hist, deaths, runStart, runEnd
	rep.Elections = len(terms)
	rep.RunMS = ms(runEnd - runStart)

	var overlaps, raw []span
	for _, terms := range perDaemon { // a daemon's terms may overlap; two daemons' may
		o, episodes := overlap(terms, func(t *term) []span { return t.adjusted })
		overlaps = append(overlaps, o...)
		rep.SplitBrainEpisodes += episodes
		r, _ := overlap(terms, func(t *term) []span { return []span{{t.start, t.observed}} })
		raw = append(raw, r...)
	}
	rep.SplitBrainMS, rep.overlaps = ms(total(overlaps)), overlaps
	rep.SplitBrainRawMS = ms(total(raw))

	var demotions []float64
	for _, t := range terms {
		if !t.standDn {
			continue
		}
		// Stand-down minus the send time of the last acknowledged write, not
		// counting time the worker spent stopped.
		d := t.observed - t.lastSent - coveredWithin(t.paused, t.lastSent, t.observed)
		demotions = append(demotions, ms(d))
		if d > bound {
			rep.DemotionViolations++
		}
	}
	rep.SelfDemotion = summarize(demotions)
	rep.DemotionBoundMS = ms(bound)

	all := works(hist, validity, int64(p.TTL), deaths, runEnd, pauses)
	checkWork(rep, all)

	for _, terms := range perDaemon {
		checkTokens(rep, terms, hist.audit)
	}
	checkFence(rep, hist)
	checkLeadership(rep, hist, deaths, p.TTL)
	checkScenarios(rep, hist.harness, terms)
	checkHandovers(rep, terms, all)
	checkCuts(rep, hist.harness, terms, runEnd)
	checkRoundTrips(rep, hist, pauses)
	checkKV(rep, hist, p.TTL, p.PageDir, dir)
	checkReplicaEvents(rep, hist.harness)

	// Cold start: until every daemon ran (the leader led, in a single-key
	// run). Leaderless: the time each daemon did not run after it first
	// did, summed over the daemons.
	for _, terms := range perDaemon {
		rep.ColdStartMS = max(rep.ColdStartMS, ms(terms[0].start-runStart))
		rep.LeaderlessMS += ms(runEnd-terms[0].start) - ms(union(terms))
	}
	if p.Fleet {
		checkFleet(rep, hist.harness, perDaemon, runEnd)
	}
	return rep
}

// readTimeline reads the harness's history: when the run started and
// ended (now, if it did not record its end), when each worker was killed,
// and each worker's pauses; crashes go into rep.
func readTimeline(rep *Report, harness []record.Event) (start, end int64, deaths map[string]int64, pauses map[string][]span) {
	deaths, pauses = map[string]int64{}, map[string][]span{}
	paused := map[string]int64{}
	for _, ev := range harness {
		switch ev.Kind {
		case "cold-start":
			start = ev.T
		case "end":
			end = ev.T
		case "pause":
			paused[ev.Target] = ev.T
		case "resume":
			pauses[ev.Target] = append(pauses[ev.Target], span{paused[ev.Target], ev.T})
		case "kill":
			deaths[ev.Target] = ev.T
		case "crash":
			rep.Crashed = append(rep.Crashed, ev.Target+": "+ev.Cause)
		}
	}
	if end == 0 {
		end = record.Now()
	}
	return start, end, deaths, pauses
}

// byDaemon splits a worker's events by the daemon they are about: a
// single-key run's all go to "".
func byDaemon(events []record.Event) map[string][]record.Event {
	out := map[string][]record.Event{}
	for _, ev := range events {
		out[ev.Daemon] = append(out[ev.Daemon], ev)
	}
	return out
}

// byDaemonTerms splits terms, in order, by daemon.
func byDaemonTerms(terms []*term) map[string][]*term {
	out := map[string][]*term{}
	for _, t := range terms {
		out[t.daemon] = append(out[t.daemon], t)
	}
	return out
}

// workerTerms cuts one worker's history into terms. IsLeader is true from a
// won event until the earlier of the stand-down and the validity deadline:
// validity after the send time of its last acknowledged write. Every
// acknowledged write counts, even one the library would have ignored for
// arriving after its deadline, so the checker's deadline is never earlier
// than the library's: overlap may be over-counted, never missed. A win with
// no acknowledged write in its validity is a problem, and its term runs to
// the recorded stand-down.
func workerTerms(name, daemon string, events []record.Event, validity int64, deaths map[string]int64, runEnd int64, paused []span) ([]*term, []string) {
	var terms []*term
	var problems []string
	var cur *term
	var lastSent, deadline int64
	closeTerm := func(at int64, standDown bool) {
		cur.observed = at
		cur.end = min(at, deadline)
		if deadline < cur.start {
			problems = append(problems, fmt.Sprintf("%s announced token %d%s with no acknowledged write in its validity", name, cur.token, about(daemon)))
			cur.end = at
		}
		cur.lastSent = lastSent
		cur.standDn = standDown
		cur.paused = paused
		cur.adjusted = subtract(span{cur.start, cur.end}, paused)
		terms = append(terms, cur)
		cur = nil
	}
	for _, ev := range events {
		switch {
		case ev.LeaseWrite():
			lastSent, deadline = ev.Sent, ev.Sent+validity
		case ev.Kind == "won":
			cur = &term{worker: name, daemon: daemon, token: ev.Token, start: ev.T, backed: lastSent}
		case ev.Kind == "lost" && cur != nil:
			closeTerm(ev.T, true)
		}
	}
	if cur != nil {
		end, killed := deaths[name]
		if !killed {
			end = runEnd
		}
		closeTerm(end, false)
	}
	return terms, problems
}

// about names a daemon in a problem's text.
func about(daemon string) string {
	if daemon == "" {
		return ""
	}
	return " of daemon " + daemon
}

// overlap sweeps the terms' spans and returns the spans during which two or
// more held at once, and how many episodes that made.
func overlap(terms []*term, spans func(*term) []span) ([]span, int) {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, t := range terms {
		for _, s := range spans(t) {
			if s.to > s.from {
				edges = append(edges, edge{s.from, +1}, edge{s.to, -1})
			}
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta // close before open at the same instant
	})
	var out []span
	active := 0
	for _, e := range edges {
		prev := active
		active += e.delta
		switch {
		case prev < 2 && active >= 2:
			out = append(out, span{from: e.at})
		case prev >= 2 && active < 2:
			out[len(out)-1].to = e.at
		}
	}
	return out, len(out)
}

// total returns the summed length of the spans.
func total(spans []span) int64 {
	var t int64
	for _, s := range spans {
		t += s.to - s.from
	}
	return t
}

// union returns the total time covered by any term's adjusted spans.
func union(terms []*term) int64 {
	var spans []span
	for _, t := range terms {
		spans = append(spans, t.adjusted...)
	}
	return unionSpans(spans)
}

// unionSpans returns the total time covered by any of the spans.
func unionSpans(spans []span) int64 {
	slices.SortFunc(spans, func(a, b span) int { return int(a.from - b.from) })
	var total, reach int64
	for _, s := range spans {
		from := max(s.from, reach)
		if s.to > from {
			total += s.to - from
			reach = s.to
		}
	}
	return total
}

// subtract removes the paused windows from s.
func subtract(s span, paused []span) []span {
	out := []span{s}
	for _, p := range paused {
		var next []span
		for _, o := range out {
			if p.to <= o.from || p.from >= o.to {
				next = append(next, o)
				continue
			}
			if p.from > o.from {
				next = append(next, span{o.from, p.from})
			}
			if p.to < o.to {
				next = append(next, span{p.to, o.to})
			}
		}
		out = next
	}
	return out
}

// coveredWithin returns how much of [from, to] the spans cover (a worker's
// pauses, say).
func coveredWithin(spans []span, from, to int64) int64 {
	var total int64
	for _, p := range spans {
		if lo, hi := max(p.from, from), min(p.to, to); hi > lo {
			total += hi - lo
		}
	}
	return total
}

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

// ms converts nanoseconds to milliseconds.
func ms(ns int64) float64 { return float64(ns) / 1e6 }

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
