package sim

import (
	"fmt"
	"slices"
	"sync"
	"time"

	election "github.com/kvelect/election"
	"github.com/kvelect/election/internal/kvcheck"
)

// What a run checks, and for whom. A suspended candidate is outside the
// clock assumption: from its suspension until three TTLs after it resumed,
// only the fencing check (tokens) applies to it, and a check of two
// leaderships is waived when one of them is its own. The library detects
// the suspend on resuming (Clock.Suspended) and stands down before it
// renews or vouches, so the others' leaderships are checked throughout.
// Everywhere else:
//
//   - never two leaders: whenever an election announces or renews, at
//     every fault, every leader's work or Once job starting, and every
//     second, at most one candidate's IsLeader is true for each key, all
//     read at one instant of simulated time;
//   - never two works: the intervals from OnWon's start to its return (and
//     from a Once job's start to its return) of different leaderships of a
//     key never overlap;
//   - tokens strictly increasing: each leadership's token, in the order
//     their work started, is greater than the one before it on that key;
//   - a Once job that returned OnceRan with a nil error and marked the key
//     is not run again while the key's done mark stands: no job starts on
//     the key within the TTL the server keeps the mark, counted from the
//     end of the work (the mark is written after it), unless the key was
//     deleted or purged meanwhile;
//   - a successful run whose outcome the run log (RecordRuns) stored with
//     a mark (DoneFor d) is not followed by another run before the mark
//     ends, d after the log's server stored the outcome, removals of the
//     key or not; a failed or interrupted run's outcome carries no mark;
//   - a failed Once job, or a successful one whose log mark is shorter
//     than the TTL, does not mark the key: its candidate writes no done
//     mark between the job's return and the last moment a late write of
//     its Once call could land (or its next run on the key);
//   - a Once call answers OnceDone only while a done mark may stand, or
//     soon after: it started at most doneSlack after the last moment some
//     Once's key mark could have stood (written after its job returned
//     nil, by the time its call returned or a late request landed, and
//     kept the TTL the server keeps writes), or before a log mark ended
//     (the log's server judges it, with ServerClockOffset to spare);
//   - liveness: each Start key has a leader at the end of the run, Quiet
//     after the last fault.

// Violation is a broken check.
type Violation struct {
	At     time.Duration // simulated time since the start of the run
	Check  string
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%9.3fs %s: %s", v.At.Seconds(), v.Check, v.Detail)
}

// interval is one leadership's work on a key.
type interval struct {
	key       int
	cand      int
	token     uint64
	start     time.Duration
	cancelled time.Duration // -1 while its context stands
	end       time.Duration // -1 while it runs
	once      bool
}

// onceResult is what a Once call returned.
type onceResult struct {
	cand     int
	work     int  // index of its work interval, -1 if it ran none
	failed   bool // its job returned an error
	outcome  string
	err      error
	called   time.Duration
	returned time.Duration
}

// runRecord is the outcome of a Once run as the run log stored it.
type runRecord struct {
	cand    int
	token   uint64
	stored  time.Duration // when the log's server stored it, since the start of the run
	doneFor time.Duration // how long its mark lasts from stored (0: none)
	failed  bool          // the run failed or was interrupted
}

// lateWrite is the longest a write can reach the server after its caller
// had its answer, as for BaseTTL (KV: a late request is applied after the
// caller's timeout, up to 0.3 TTL after it was sent).
const lateWrite = 600 * time.Millisecond

// doneSlack is how long after a done mark can last have stood a Once may
// still answer OnceDone, as for BaseTTL: a watcher may show the mark late
// (a cut or a window of late watched entries lasts up to 5 TTLs), and an
// election counts a mark it sees for up to a TTL on its own clock.
const doneSlack = 15 * time.Second

// record collects what a run did, for the checks.
type record struct {
	mu    sync.Mutex
	start time.Time
	// lateWrite and doneSlack are those of the run's schedule, stretched
	// to its TTL.
	lateWrite, doneSlack time.Duration
	works                []interval
	lastToken            map[int]uint64
	onces                []onceResult
	removals             map[int][]time.Duration
	exempt               map[int][][2]time.Duration
	runs                 []runRecord // the run log's outcomes, read after the run
	violations           []Violation
	timeline             []Decision
}

// Decision is one decision on the timeline of a run: a candidate's win,
// stand-down or Once outcome, or the outcome of a request to a leader.
type Decision struct {
	At   time.Duration // simulated time since the start of the run
	What string
}

func (d Decision) String() string { return fmt.Sprintf("%9.3fs %s", d.At.Seconds(), d.What) }

// decided records a decision on the timeline.
func (r *record) decided(format string, args ...any) {
	r.mu.Lock()
	r.timeline = append(r.timeline, Decision{At: r.now(), What: fmt.Sprintf(format, args...)})
	r.mu.Unlock()
}

// newRecord starts the record of a run of s.
func newRecord(s Schedule) *record {
	return &record{start: time.Now(), lateWrite: s.stretch(lateWrite), doneSlack: s.stretch(doneSlack), lastToken: map[int]uint64{}, removals: map[int][]time.Duration{}, exempt: map[int][][2]time.Duration{}}
}

func (r *record) now() time.Duration { return time.Since(r.start) }

func (r *record) violate(check, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violateLocked(check, format, args...)
}

func (r *record) violateLocked(check, format string, args ...any) {
	r.violations = append(r.violations, Violation{At: r.now(), Check: check, Detail: fmt.Sprintf(format, args...)})
}

// begin records the start of a leadership's work and checks its token.
func (r *record) begin(key, cand int, token uint64, once bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if last := r.lastToken[key]; token <= last {
		r.violateLocked("tokens increase", "key %d: c%d's work started with token %d after token %d", key, cand, token, last)
	}
	r.lastToken[key] = max(r.lastToken[key], token)
	r.works = append(r.works, interval{key: key, cand: cand, token: token, start: r.now(), cancelled: -1, end: -1, once: once})
	return len(r.works) - 1
}

// cancel records that work id's leadership context ended.
func (r *record) cancel(id int) {
	r.mu.Lock()
	r.works[id].cancelled = r.now()
	r.mu.Unlock()
}

// end records that work id returned.
func (r *record) end(id int) {
	r.mu.Lock()
	r.works[id].end = r.now()
	r.mu.Unlock()
}

// draining reports whether some work on key had its context end and has not
// returned, or returned within the last 20 ms.
func (r *record) draining(key int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for _, w := range slices.Backward(r.works) {
		if w.key == key && w.cancelled >= 0 && (w.end < 0 || now-w.end < 20*time.Millisecond) {
			return true
		}
	}
	return false
}

// running returns the candidate whose work on key runs now with its
// context standing, -1 if none.
func (r *record) running(key int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range slices.Backward(r.works) {
		if w.key == key && w.cancelled < 0 && w.end < 0 {
			return w.cand
		}
	}
	return -1
}

func (r *record) removed(key int) {
	r.mu.Lock()
	r.removals[key] = append(r.removals[key], r.now())
	r.mu.Unlock()
}

// suspended records that a suspension puts cand outside the clock
// assumption in [from, to].
func (r *record) suspended(cand int, from, to time.Duration) {
	r.mu.Lock()
	r.exempt[cand] = append(r.exempt[cand], [2]time.Duration{from, to})
	r.mu.Unlock()
}

// exemptLocked reports whether cand is outside the clock assumption at
// some moment of [from, to].
func (r *record) exemptLocked(cand int, from, to time.Duration) bool {
	for _, x := range r.exempt[cand] {
		if from <= x[1] && x[0] <= to {
			return true
		}
	}
	return false
}

// anyExemptLocked reports whether one of cands is outside the clock
// assumption at some moment of [from, to].
func (r *record) anyExemptLocked(cands []int, from, to time.Duration) bool {
	return slices.ContainsFunc(cands, func(c int) bool { return r.exemptLocked(c, from, to) })
}

// checkDone checks each Once call that answered OnceDone against the done
// marks that could have stood then (see doneSlack); ttl is the time the
// server keeps a write.
func (r *record) checkDone(ttl time.Duration) {
	var marks, logMarks [][2]time.Duration // from the end of a job to the last moment its mark could stand
	for _, o := range r.onces {
		if o.outcome == "ran" && !o.failed && o.work >= 0 && r.works[o.work].end >= 0 && !r.releases(o, ttl) {
			marks = append(marks, [2]time.Duration{r.works[o.work].end, o.returned + r.lateWrite + ttl})
		}
	}
	for _, rr := range r.runs {
		if w := r.workOf(rr); w >= 0 && rr.doneFor > 0 && r.works[w].end >= 0 {
			logMarks = append(logMarks, [2]time.Duration{r.works[w].end, rr.stored + rr.doneFor + election.ServerClockOffset})
		}
	}
	for _, o := range r.onces {
		if o.outcome != "done" || r.exemptLocked(o.cand, o.called, o.returned) {
			continue
		}
		last := time.Duration(-1)
		for _, m := range marks {
			if m[0] <= o.returned {
				last = max(last, m[1])
			}
		}
		logged := slices.ContainsFunc(logMarks, func(m [2]time.Duration) bool { return m[0] <= o.returned && o.called <= m[1] })
		if !logged && (last < 0 || o.called > last+r.doneSlack) {
			detail := fmt.Sprintf("c%d's Once called at %.3fs answered done, and no done mark was written before", o.cand, o.called.Seconds())
			if last >= 0 {
				detail = fmt.Sprintf("c%d's Once called at %.3fs answered done, %v after the last done mark could have stood (%.3fs)",
					o.cand, o.called.Seconds(), o.called-last, last.Seconds())
			}
			r.violations = append(r.violations, Violation{At: o.called, Check: "once done", Detail: detail})
		}
	}
}

// workOf is the index of the work interval of the run rr records, -1 if
// none.
func (r *record) workOf(rr runRecord) int {
	for i, w := range r.works {
		if w.once && w.cand == rr.cand && w.token == rr.token {
			return i
		}
	}
	return -1
}

// logged is the run log's record of the outcome of Once call o, if any.
func (r *record) logged(o onceResult) (runRecord, bool) {
	if o.work < 0 {
		return runRecord{}, false
	}
	w := r.works[o.work]
	for _, rr := range r.runs {
		if rr.cand == w.cand && rr.token == w.token {
			return rr, true
		}
	}
	return runRecord{}, false
}

// releases reports whether Once call o's run ran and must release the key
// rather than mark it: its job failed, or the run log stored its outcome
// with a mark shorter than the TTL.
func (r *record) releases(o onceResult, ttl time.Duration) bool {
	if o.outcome != "ran" || o.work < 0 {
		return false
	}
	rr, ok := r.logged(o)
	return o.failed || ok && rr.doneFor > 0 && rr.doneFor < ttl
}

// checkRuns checks the run log's marks, and that runs that must release
// the key do not mark it, against ops, the writes that reached the server
// (recorded since the run started), on the Once key.
func (r *record) checkRuns(ttl time.Duration, key string, ops []kvcheck.Op) {
	for _, rr := range r.runs {
		i := r.workOf(rr)
		if rr.doneFor > 0 && rr.failed {
			r.violations = append(r.violations, Violation{At: rr.stored, Check: "once mark",
				Detail: fmt.Sprintf("c%d's run (token %d) failed or was interrupted, and its outcome in the run log carries a mark of %v", rr.cand, rr.token, rr.doneFor)})
		}
		if i < 0 || rr.doneFor == 0 || rr.failed {
			continue
		}
		done := r.works[i]
		if done.end < 0 || r.exemptLocked(done.cand, done.start, rr.stored) {
			continue
		}
		until := rr.stored + rr.doneFor
		for _, w := range r.works[i+1:] {
			if w.key != done.key || w.start <= done.end || w.start >= until || r.exemptLocked(w.cand, w.start, w.start) {
				continue
			}
			r.violations = append(r.violations, Violation{At: w.start, Check: "once mark",
				Detail: fmt.Sprintf("c%d's job (token %d) ran at %.3fs, before the mark of c%d's run (token %d; stored %.3fs, done for %v) ended at %.3fs",
					w.cand, w.token, w.start.Seconds(), done.cand, done.token, rr.stored.Seconds(), rr.doneFor, until.Seconds())})
		}
	}
	for _, o := range r.onces {
		if !r.releases(o, ttl) || r.works[o.work].end < 0 || r.exemptLocked(o.cand, o.called, o.returned+r.lateWrite) {
			continue
		}
		// up to the last moment a late write of the call could land, or
		// the candidate's next run on the key, whose own mark may follow
		from, to := int64(r.works[o.work].end), int64(o.returned+r.lateWrite)
		if i := slices.IndexFunc(r.works[o.work+1:], func(w interval) bool { return w.cand == o.cand && w.key == r.works[o.work].key }); i >= 0 {
			to = min(to, int64(r.works[o.work+1+i].start))
		}
		mark := "done:" + name(o.cand)
		for _, op := range ops {
			if op.Client == name(o.cand) && op.Key == key && op.Value == mark && op.Call >= from && op.Call <= to {
				why := "its job failed"
				if !o.failed {
					rr, _ := r.logged(o)
					why = fmt.Sprintf("its mark in the run log lasts %v, less than the TTL", rr.doneFor)
				}
				r.violations = append(r.violations, Violation{At: time.Duration(op.Call), Check: "once release",
					Detail: fmt.Sprintf("c%d's Once called at %.3fs marked the key done at %.3fs, and %s", o.cand, o.called.Seconds(), time.Duration(op.Call).Seconds(), why)})
			}
		}
	}
}

// leaders checks one sample: the candidates whose IsLeader was true on key
// at one instant.
func (r *record) leaders(key int, cands []int, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); len(cands) > 1 && !r.anyExemptLocked(cands, now, now) {
		r.violateLocked("one leader", "key %d: IsLeader true on c%v at once (sampled at %s)", key, cands, why)
	}
}

// finish runs the checks over the whole run, with end the time the run
// ended, ttl the time the server keeps a write, and ops the writes that
// reached the server (for the Once key's, onceKey).
func (r *record) finish(end, ttl time.Duration, onceKey string, ops []kvcheck.Op) []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	upTo := func(t time.Duration) time.Duration {
		if t < 0 {
			return end
		}
		return t
	}
	for i, a := range r.works {
		for _, b := range r.works[i+1:] {
			if b.start >= upTo(a.end) {
				break // works are recorded in the order they start
			}
			if a.key != b.key || (a.cand == b.cand && a.token == b.token) {
				continue
			}
			aEnd, bEnd := upTo(a.end), upTo(b.end)
			if a.start < bEnd && b.start < aEnd && !r.exemptLocked(a.cand, a.start, aEnd) && !r.exemptLocked(b.cand, b.start, bEnd) {
				r.violations = append(r.violations, Violation{At: max(a.start, b.start), Check: "one work",
					Detail: fmt.Sprintf("key %d: c%d's work (token %d, %.3fs–%.3fs) overlaps c%d's (token %d, %.3fs–%.3fs)",
						a.key, a.cand, a.token, a.start.Seconds(), aEnd.Seconds(), b.cand, b.token, b.start.Seconds(), bEnd.Seconds())})
			}
		}
	}
	for _, o := range r.onces {
		if o.outcome != "ran" || o.err != nil || o.work < 0 || r.releases(o, ttl) {
			continue
		}
		done := r.works[o.work]
		if done.end < 0 || r.exemptLocked(done.cand, done.start, o.returned) {
			continue
		}
		for _, w := range r.works[o.work+1:] {
			if w.key != done.key || w.start <= done.end || w.start >= done.end+ttl || r.exemptLocked(w.cand, w.start, w.start) {
				continue
			}
			removed := false
			for _, at := range r.removals[done.key] {
				removed = removed || (at >= done.end && at <= w.start)
			}
			if !removed {
				r.violations = append(r.violations, Violation{At: w.start, Check: "once",
					Detail: fmt.Sprintf("c%d's job (token %d) ran at %.3fs, %v after c%d's job (token %d) completed and was marked done",
						w.cand, w.token, w.start.Seconds(), w.start-done.end, o.cand, done.token)})
			}
		}
	}
	r.checkDone(ttl)
	r.checkRuns(ttl, onceKey, ops)
	slices.SortStableFunc(r.violations, func(a, b Violation) int { return int(a.At - b.At) })
	return r.violations
}
