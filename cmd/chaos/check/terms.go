//go:build unix

package check

import (
	"fmt"
	"slices"
	"sort"

	"github.com/kvelect/election/cmd/chaos/record"
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
