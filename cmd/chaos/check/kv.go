//go:build unix

package check

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/internal/kvcheck"
)

// kvCheckTimeout bounds the linearizability check: past it the verdict is
// "inconclusive", which fails the run.
const kvCheckTimeout = time.Minute

// checkKV checks every write the workers and the harness made on the
// bucket's keys for linearizability (internal/kvcheck) and for the order of
// their revisions, once the writes of unknown outcome are settled, where
// it can, from the stream's record of its messages (the audit). A failed
// check's history is drawn, with the fault windows marked, to
// kv-linearizability.html in pageDir (or in the histories' directory).
func checkKV(rep *Report, hist *history, ttl time.Duration, pageDir, dir string) {
	var ops []kvcheck.Op
	add := func(events []record.Event) {
		type call struct {
			sent    int64
			op, key string
		}
		returned := map[call]bool{}
		for _, ev := range events {
			if ev.Kind == "op" {
				ops = append(ops, kvOp(ev))
				returned[call{ev.Sent, ev.Op, ev.Key}] = true
			}
		}
		for _, ev := range events {
			if ev.Kind == "call" && !returned[call{ev.Sent, ev.Op, ev.Key}] {
				ops = append(ops, kvOp(ev)) // cut short by the process's death: of unknown outcome
			}
		}
	}
	add(hist.harness)
	for _, events := range hist.workers {
		add(events)
	}
	ops, settled := kvcheck.Resolve(ops, streamRecord(hist))
	rep.KVUnknown, rep.KVSettled, rep.KVRecordGaps = settled.Unknown, settled.NotApplied+settled.Applied, settled.Gaps
	rep.KVBounded = settled.Bounded - settled.Applied
	r := kvcheck.Check(ops, ttl, kvCheckTimeout)
	rep.KVOps, rep.KVLinearizable, rep.KVOrderProblems = r.Ops, r.Linearizable, len(r.Order)
	rep.KVCheckMS = ms(int64(r.Took))
	for _, key := range r.Illegal {
		rep.KVProblems = append(rep.KVProblems, fmt.Sprintf("key %q: no order of its calls explains what they returned", key))
	}
	rep.KVProblems = append(append(rep.KVProblems, r.Order...), settled.Unexplained...)
	rep.KVUnexplained = len(settled.Unexplained)
	if r.Linearizable == "true" && len(r.Order) == 0 {
		return // unexplained entries need no drawing: the problems name them
	}
	if pageDir == "" {
		pageDir = dir
	}
	page := filepath.Join(pageDir, "kv-linearizability.html")
	if err := r.Visualize(page, faultWindows(hist.harness)); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: kv visualization:", err)
		return
	}
	rep.KVPage = page
}

// streamRecord is the audit's record of the bucket's stream, up to the last
// revision the harness read once every worker had stopped.
func streamRecord(hist *history) kvcheck.Stream {
	var s kvcheck.Stream
	for _, ev := range hist.harness {
		if ev.Kind == "last-revision" {
			s.Last = ev.Rev
		}
	}
	for _, ev := range hist.audit {
		e := kvcheck.Entry{Rev: ev.Rev, Key: ev.Key, Kind: kvcheck.Put, Value: ev.Value, Conditional: ev.Conditional, Expected: ev.Expected}
		switch {
		case ev.Op == "DEL":
			e.Kind = kvcheck.Delete
		case ev.Op == "PURGE":
			e.Kind = kvcheck.Purge
		case ev.Op != "PUT":
			e.Kind = "" // a marker the server wrote
		}
		s.Entries = append(s.Entries, e)
	}
	return s
}

// kvOp is the call an op event records, or a call event whose call never
// returned: of unknown outcome.
func kvOp(ev record.Event) kvcheck.Op {
	op := kvcheck.Op{Client: ev.Worker, Key: ev.Key, Value: ev.Value, Call: ev.Sent, Return: ev.T, Rev: ev.Rev}
	switch ev.Op {
	case "create":
		op.Kind = kvcheck.Create
	case "update":
		op.Kind, op.Expected = kvcheck.Update, ev.Expected
	case "put":
		op.Kind = kvcheck.Put
	case "delete", "purge":
		op.Kind = kvcheck.Delete
		if ev.Op == "purge" {
			op.Kind = kvcheck.Purge
		}
		// A worker's delete may be conditional (a release before the
		// announce time); its revision is an option the recorder cannot
		// read. The harness's key faults are not.
		op.Unrecorded = ev.Worker != "harness"
	}
	switch ev.Outcome {
	case "ok":
		op.Outcome = kvcheck.OK
	case "conflict":
		op.Outcome = kvcheck.Conflict
	default:
		op.Outcome, op.Rev = kvcheck.Unknown, 0
	}
	return op
}

// faultWindows returns the harness's faults, from each fault to its heal.
func faultWindows(harness []record.Event) []kvcheck.Window {
	var windows []kvcheck.Window
	open := -1
	for _, ev := range harness {
		switch ev.Kind {
		case "fault":
			windows = append(windows, kvcheck.Window{Name: ev.Scenario, Start: ev.T, End: ev.T})
			open = len(windows) - 1
		case "heal":
			if open >= 0 {
				windows[open].End = ev.T
				open = -1
			}
		}
	}
	return windows
}
