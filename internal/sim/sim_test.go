package sim

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvelect/election/internal/kvcheck"
)

// TestSeeds runs a small fixed range of seeds: every check must hold.
func TestSeeds(t *testing.T) {
	sum := Run(t, Config{First: 1, Seeds: 4, Length: 10 * time.Minute})
	for _, res := range sum.failed {
		Report(&testWriter{t}, res)
	}
	t.Logf("%d seeds, %.2f simulated hours, faults %v, %d violations, %.1f s", sum.Seeds, sum.SimulatedHours, sum.Faults, sum.Violations, sum.WallSeconds)
	if sum.Violations > 0 {
		t.Errorf("%d violations in seeds %v", sum.Violations, sum.FailedSeeds)
	}
}

type testWriter struct{ t testing.TB }

func (w *testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// TestOnceDoneOnlyWhileAMarkMayStand checks the check: OnceDone right
// after a job marked done passes, OnceDone long after the mark aged out
// (or with no mark at all) is a violation.
func TestOnceDoneOnlyWhileAMarkMayStand(t *testing.T) {
	const ttl = 2 * time.Second
	r := newRecord(Schedule{TTL: BaseTTL})
	r.works = []interval{{key: 1, cand: 0, token: 5, start: 10 * time.Second, cancelled: -1, end: 11 * time.Second, once: true}}
	r.onces = []onceResult{
		{cand: 1, work: -1, outcome: "done", called: 5 * time.Second, returned: 5 * time.Second},
		{cand: 0, work: 0, outcome: "ran", called: 9 * time.Second, returned: 11100 * time.Millisecond},
		{cand: 1, work: -1, outcome: "done", called: 12 * time.Second, returned: 12 * time.Second},
		{cand: 2, work: -1, outcome: "done", called: 60 * time.Second, returned: 60 * time.Second},
	}
	vs := r.finish(70*time.Second, ttl, "cron", nil)
	if len(vs) != 2 || vs[0].At != 5*time.Second || vs[1].At != 60*time.Second {
		t.Fatalf("violations %v, want the done answers at 5 s (no mark yet) and 60 s (the mark gone) only", vs)
	}
	for _, v := range vs {
		if v.Check != "once done" {
			t.Errorf("%v: want the once done check", v)
		}
	}
}

// TestTheHistoryCheckFailsOnAStoreThatBreaksCompareAndSet runs a seed for
// a minute with candidate 0 on a store that writes an Update the server
// refused (the key had moved on) and reports it won: the history of the
// store's writes is not linearizable, and the run says so. The same seed
// on the real store passes (TestASeedReplays).
func TestTheHistoryCheckFailsOnAStoreThatBreaksCompareAndSet(t *testing.T) {
	s := NewSchedule(31, time.Minute)
	s.breakCAS = true
	res := runSchedule(t, s)
	for _, v := range res.Violations {
		if v.Check == "linearizable" {
			t.Logf("%v (%d writes, checked in %v)", v, res.Ops, res.CheckTook)
			return
		}
	}
	t.Errorf("no linearizability violation on a broken store; violations: %v", res.Violations)
}

// TestShrinkKeepsTheFewestFaultsThatStillFail shrinks a failing seed whose
// failure needs no fault (candidate 0's store breaks compare-and-set): the
// shrunk schedule keeps none, still fails the same check, and its replay
// command says so.
func TestShrinkKeepsTheFewestFaultsThatStillFail(t *testing.T) {
	s := NewSchedule(31, time.Minute)
	s.breakCAS = true
	res := runSchedule(t, s)
	if len(res.Violations) == 0 || len(s.Faults) == 0 {
		t.Fatalf("want a failing run with faults to shrink; %d violations, %d faults", len(res.Violations), len(s.Faults))
	}
	shrunk, r := Shrink(t, s, res, &testWriter{t})
	if len(shrunk.Faults) != 0 || shrunk.Kept == nil || len(shrunk.Kept) != 0 {
		t.Errorf("shrunk to %d faults (kept %v), want none", len(shrunk.Faults), shrunk.Kept)
	}
	if !slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Check == res.Violations[0].Check }) {
		t.Errorf("the shrunk run's violations %v, want one of %q", r.Violations, res.Violations[0].Check)
	}
	if want := `go run ./cmd/chaos -simulate -seed 31 -length 1m0s -keep ""`; shrunk.Replay() != want {
		t.Errorf("replay %q, want %q", shrunk.Replay(), want)
	}
}

// TestRunLogMarksBindAndFailuresRelease checks the checks of Once runs
// recorded in a run log: a run within a logged mark is a violation whether
// or not the key was removed, one after the mark ended is not; a failed
// run that marks the key, and a failed run's outcome that carries a mark,
// are violations; a short log mark that also marks the key is one.
func TestRunLogMarksBindAndFailuresRelease(t *testing.T) {
	const ttl = 2 * time.Second
	s := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	r := newRecord(Schedule{TTL: BaseTTL})
	r.works = []interval{
		{key: 1, cand: 0, token: 5, start: s(10000), cancelled: -1, end: s(11000), once: true},
		{key: 1, cand: 1, token: 7, start: s(11500), cancelled: -1, end: s(11600), once: true}, // within c0's mark
		{key: 1, cand: 2, token: 9, start: s(12200), cancelled: -1, end: s(12300), once: true}, // after it
		{key: 1, cand: 2, token: 11, start: s(20000), cancelled: -1, end: s(20100), once: true},
	}
	r.onces = []onceResult{
		{cand: 0, work: 0, outcome: "ran", called: s(9900), returned: s(11100)},
		{cand: 1, work: 1, outcome: "ran", failed: true, called: s(11400), returned: s(11700)},
		{cand: 2, work: 2, outcome: "ran", called: s(12100), returned: s(12400)},
		{cand: 2, work: 3, outcome: "ran", called: s(19900), returned: s(20200)},
	}
	r.runs = []runRecord{
		{cand: 0, token: 5, stored: s(11050), doneFor: s(1000)},
		{cand: 1, token: 7, stored: s(11650), failed: true},
		{cand: 2, token: 9, stored: s(12350), doneFor: s(1500)},
		{cand: 2, token: 11, stored: s(20150), doneFor: s(500), failed: true},
	}
	r.removals[1] = []time.Duration{s(11200)}
	ops := []kvcheck.Op{
		{Client: "c1", Key: "cron", Value: "done:c1", Call: int64(s(11650))}, // the failed run marks the key
		{Client: "c2", Key: "cron", Value: "done:c2", Call: int64(s(12380))}, // a 1.5 s log mark marks the key
	}
	vs := r.finish(30*time.Second, ttl, "cron", ops)
	want := []string{"once mark 11.5", "once release 11.65", "once release 12.38", "once mark 20.15"}
	var got []string
	for _, v := range vs {
		got = append(got, fmt.Sprintf("%s %g", v.Check, v.At.Seconds()))
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations %v, want %v", vs, want)
	}
}
