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
	"sort"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
)

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

// ms converts nanoseconds to milliseconds.
func ms(ns int64) float64 { return float64(ns) / 1e6 }
