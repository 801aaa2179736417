package sim

import (
	"fmt"
	"slices"
	"sync"
	"time"
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
//   - a Once job that returned OnceRan with a nil error is not run again
//     while its done mark stands: no job starts on the key within the TTL
//     the server keeps the mark, counted from the end of the work (the mark
//     is written after it), unless the key was deleted or purged meanwhile;
//   - a Once call answers OnceDone only while a done mark may stand, or
//     soon after: it started at most doneSlack after the last moment some
//     Once's mark could have stood (written after its job returned, by the
//     time its call returned or a late request landed, and kept the TTL the
//     server keeps writes);
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
	work     int // index of its work interval, -1 if it ran none
	outcome  string
	err      error
	called   time.Duration
	returned time.Duration
}

// lateWrite is the longest a write can reach the server after its caller
// had its answer (KV: a late request is applied after the caller's
// timeout, up to 600 ms after it was sent).
const lateWrite = 600 * time.Millisecond

// doneSlack is how long after a done mark can last have stood a Once may
// still answer OnceDone: a watcher may show the mark late (a cut or a
// window of late watched entries lasts up to 10 s), and an election counts
// a mark it sees for up to a TTL on its own clock.
const doneSlack = 15 * time.Second

// record collects what a run did, for the checks.
type record struct {
	mu         sync.Mutex
	start      time.Time
	works      []interval
	lastToken  map[int]uint64
	onces      []onceResult
	removals   map[int][]time.Duration
	exempt     map[int][][2]time.Duration
	violations []Violation
	timeline   []Decision
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

func newRecord() *record {
	return &record{start: time.Now(), lastToken: map[int]uint64{}, removals: map[int][]time.Duration{}, exempt: map[int][][2]time.Duration{}}
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
	var marks [][2]time.Duration // from the end of a job to the last moment its mark could stand
	for _, o := range r.onces {
		if o.outcome == "ran" && o.work >= 0 && r.works[o.work].end >= 0 {
			marks = append(marks, [2]time.Duration{r.works[o.work].end, o.returned + lateWrite + ttl})
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
		if last < 0 || o.called > last+doneSlack {
			detail := fmt.Sprintf("c%d's Once called at %.3fs answered done, and no done mark was written before", o.cand, o.called.Seconds())
			if last >= 0 {
				detail = fmt.Sprintf("c%d's Once called at %.3fs answered done, %v after the last done mark could have stood (%.3fs)",
					o.cand, o.called.Seconds(), o.called-last, last.Seconds())
			}
			r.violations = append(r.violations, Violation{At: o.called, Check: "once done", Detail: detail})
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
// ended, and ttl the time the server keeps a write.
func (r *record) finish(end, ttl time.Duration) []Violation {
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
		if o.outcome != "ran" || o.err != nil || o.work < 0 {
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
	slices.SortStableFunc(r.violations, func(a, b Violation) int { return int(a.At - b.At) })
	return r.violations
}
