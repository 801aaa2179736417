//go:build unix

package check

import (
	"fmt"
	"sort"

	"github.com/kvelect/election/cmd/chaos/record"
)

// work is what one leadership started on one worker: from its won event to
// the return of its OnWon (a fleet daemon's Run), recorded as returned. A
// work that did not return ends at its worker's death, its process's exit
// or the end of the run.
type work struct {
	worker   string
	daemon   string
	token    uint64
	start    int64
	end      int64
	returned bool // ended by its recorded return
	// cut: the worker was stopped (SIGSTOP) past its validity while the
	// work ran, and the work counts only until a TTL after its last write
	// (see works).
	cut bool
}

// works cuts every worker's history into works. A worker stopped with
// SIGSTOP cannot stop its work: one stopped past its validity deadline
// (validity after its last acknowledged write) counts as working until a
// TTL after that write, the first moment its key can age out on this
// host's one clock, or until it was stopped if that came later. What it
// does after it resumes is the fenced resource's to refuse (suspend is
// outside the library's clock assumption).
func works(hist *history, validity, ttl int64, deaths map[string]int64, runEnd int64, pauses map[string][]span) []*work {
	exits := map[string]int64{}
	for _, ev := range hist.harness {
		if ev.Kind == "exit" {
			exits[ev.Target] = ev.T
		}
	}
	var out []*work
	for name, events := range hist.workers {
		end, killed := deaths[name]
		if !killed {
			var exited bool
			if end, exited = exits[name]; !exited {
				end = runEnd
			}
		}
		for daemon, events := range byDaemon(events) {
			var cur *work
			var sent []int64 // send times of the acknowledged writes, in order
			for _, ev := range events {
				switch {
				case ev.LeaseWrite():
					sent = append(sent, ev.Sent)
				case ev.Kind == "won":
					if cur != nil { // a won with no return before it: the earlier ends here
						cur.end = ev.T
					}
					cur = &work{worker: name, daemon: daemon, token: ev.Token, start: ev.T, end: end}
					out = append(out, cur)
				case ev.Kind == "returned" && cur != nil && ev.Token == cur.token:
					cur.end, cur.returned = ev.T, true
					cur = nil
				}
			}
			for _, w := range out {
				if w.worker == name && w.daemon == daemon {
					cutAtSuspension(w, sent, pauses[name], validity, ttl)
				}
			}
		}
	}
	return out
}

// cutAtSuspension ends w a TTL after its last acknowledged write (sent:
// their send times, in order) if its worker was stopped while it ran and
// resumed only past its validity deadline (see works).
func cutAtSuspension(w *work, sent []int64, paused []span, validity, ttl int64) {
	for _, p := range paused {
		if p.from < w.start || p.from >= w.end {
			continue
		}
		var last int64
		if i := sort.Search(len(sent), func(i int) bool { return sent[i] > p.from }); i > 0 {
			last = sent[i-1]
		}
		if p.to <= last+validity {
			continue
		}
		if at := max(p.from, last+ttl); at < w.end {
			w.end, w.cut = at, true
		}
		return
	}
}

// checkWork checks that the works of different workers on one daemon (the
// one key of a single-key run) never overlap: a successor's won never comes
// before the previous leader's work returned (or ended at its death).
func checkWork(rep *Report, all []*work) {
	byDaemon := map[string][]*work{}
	for _, w := range all {
		byDaemon[w.daemon] = append(byDaemon[w.daemon], w)
		if w.cut {
			rep.WorksCut++
		}
	}
	var overlaps []span
	for _, ws := range byDaemon {
		sort.Slice(ws, func(i, j int) bool { return ws[i].start < ws[j].start })
		for i, a := range ws {
			for _, b := range ws[i+1:] {
				if b.start >= a.end {
					break
				}
				if a.worker == b.worker {
					continue
				}
				to := min(a.end, b.end)
				overlaps = append(overlaps, span{b.start, to})
				rep.WorkOverlaps++
				how := "returned"
				if !a.returned {
					how = "ended"
				}
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s won token %d%s %.1f ms before the work of %s with token %d %s",
					b.worker, b.token, about(b.daemon), ms(a.end-b.start), a.worker, a.token, how))
			}
		}
	}
	rep.WorkOverlapMS = ms(unionSpans(overlaps))
}

// faultWindow is a fault and when its window ends at the latest: at the
// next fault or the next scenario's preparation (checkScenarios).
type faultWindow struct {
	fault record.Event
	until int64
}

// checkHandovers measures, for each fault of a single-key run whose target
// led then and whose work returned within the fault's window (not cut at a
// suspension), the time
// from that return to the next leader's won within it: how soon a
// successor leads once the old work has stopped. A negative figure is a
// work overlap.
func checkHandovers(rep *Report, terms []*term, all []*work) {
	for _, sr := range rep.Scenarios {
		var samples []float64
		for _, fw := range sr.windows {
			f := fw.fault
			w := workAt(all, f.Target, f.T)
			if w == nil || !w.returned || w.cut || w.end >= fw.until {
				continue
			}
			for _, t := range terms {
				if t.start > f.T && t.start < fw.until {
					samples = append(samples, ms(t.start-w.end))
					break
				}
			}
		}
		sr.HandoverMS = summarize(samples)
	}
}

// workAt returns the work of worker on the one key of a single-key run
// that ran at moment at, if any.
func workAt(all []*work, worker string, at int64) *work {
	for _, w := range all {
		if w.worker == worker && w.daemon == "" && w.start <= at && at < w.end {
			return w
		}
	}
	return nil
}
