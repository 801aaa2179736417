// Package kvcheck checks a recorded history of calls on the keys of one
// JetStream Key-Value bucket: for linearizability, with Porcupine, against a
// model of one key with revisions; and, more cheaply, for the order of the
// revisions the server handed out.
//
// The model is the contract the election relies on: a Create succeeds only
// over no value (no entry, a delete or purge marker, or a value that aged
// out), an Update only over the revision it names, and every write gets a
// revision above every earlier one. A call whose outcome is unknown (it
// timed out, or its connection broke) may have taken effect at any moment
// after it was sent, or never. A live value may age out once the bucket's
// TTL has passed since its write was sent, and not before; so may a delete
// or purge marker, which leaves the key with no entry at all.
package kvcheck

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is what a call does.
type Kind string

// The calls the election makes, and those a fault injects.
const (
	Create Kind = "create" // a write only over no value
	Update Kind = "update" // a write only over the revision Op.Expected
	Put    Kind = "put"    // an unconditional write
	Delete Kind = "delete" // a delete marker; with Op.Expected > 0, only over that revision
	Purge  Kind = "purge"  // a purge marker; with Op.Expected > 0, only over that revision
)

// Outcome is how a call returned.
type Outcome string

// The outcomes of a call.
const (
	OK       Outcome = "ok"       // it took effect; a write's Op.Rev is its revision
	Conflict Outcome = "conflict" // the server refused it: the key was not as the call required
	Unknown  Outcome = "unknown"  // it may or may not have taken effect (a timeout, a broken connection)
)

// Op is one call on one key, timed on a clock that every recording process
// shares (CLOCK_MONOTONIC on one host).
type Op struct {
	Client   string // who called: a worker, a node, the harness
	Key      string
	Kind     Kind
	Expected uint64 // the revision an Update (or a conditional Delete or Purge) requires; 0 for an Update: no entry at all
	// Unrecorded: a Delete or Purge whose condition the recorder could not
	// see; it may have been taken or refused whatever the key held.
	Unrecorded bool
	Call       int64 // when it was sent, ns
	Return     int64 // when it returned, ns; ignored for an Unknown outcome
	Outcome    Outcome
	Rev        uint64 // the revision an OK Create, Update or Put was given
	Value      string // what a Create, Update or Put wrote, for Resolve
	// Before bounds a call of unknown outcome: if it took effect, it did so
	// before this time (0: it may have at any time after it was sent).
	// Resolve sets it.
	Before int64
}

// Result is what Check found.
type Result struct {
	Ops  int // operations checked
	Keys int
	// Linearizable is "true", "false", or "inconclusive" when the check ran
	// out of time: never a pass.
	Linearizable string
	Illegal      []string      // the keys whose history no order explains
	Order        []string      // problems with the revisions' order, at most 20
	Took         time.Duration // how long the linearizability check took

	model porcupine.Model
	info  porcupine.LinearizationInfo
	base  int64 // the earliest time in the history, for the visualization
}

// Window is a span of the history to mark in the visualization: a fault.
type Window struct {
	Name       string
	Start, End int64
}

// Check checks ops, made on a bucket with the given TTL, within timeout.
func Check(ops []Op, ttl, timeout time.Duration) Result {
	r := Result{Ops: len(ops), Order: orderProblems(ops)}
	keys := map[string]bool{}
	history := make([]porcupine.Operation, len(ops))
	clients := map[string]int{}
	end := int64(0)
	for _, op := range ops {
		end = max(end, op.Call, op.Return)
	}
	r.base = end
	passed := passedBy(ops)
	for i, op := range ops {
		keys[op.Key] = true
		if _, ok := clients[op.Client]; !ok {
			clients[op.Client] = len(clients)
		}
		ret := op.Return
		if op.Outcome == Unknown {
			ret = end + 1 // it may take effect any time after it was sent
			if op.Before > 0 {
				ret = min(ret, op.Before)
			}
			if op.Kind == Update && op.Expected > 0 {
				if by, ok := passed(op.Key, op.Expected); ok {
					ret = min(ret, max(by, op.Return))
				}
			}
		}
		r.base = min(r.base, op.Call)
		history[i] = porcupine.Operation{ClientId: clients[op.Client], Input: op, Call: op.Call, Output: op.Outcome, Return: ret}
	}
	r.Keys = len(keys)
	r.model = model(ttl)
	started := time.Now()
	result, info := porcupine.CheckOperationsVerbose(r.model, history, timeout)
	r.Took, r.info = time.Since(started), info
	switch result {
	case porcupine.Ok:
		r.Linearizable = "true"
	case porcupine.Illegal:
		r.Linearizable = "false"
		r.Illegal = illegalKeys(ops, ttl)
	default:
		r.Linearizable = "inconclusive"
	}
	return r
}

// passedBy returns, for a key and a revision rev, the earliest return of a
// write that gave the key a revision above rev. An Update expecting rev
// cannot take effect after that: a key's revision only grows (or becomes 0
// when its value ages out), so it is never rev again. Bounding such an
// Update of unknown outcome there, instead of at the end of the history,
// keeps the search small; a store that reused a revision still fails, as
// the write that reused it is then one the model cannot explain.
func passedBy(ops []Op) func(key string, rev uint64) (int64, bool) {
	writes := map[string][]Op{}
	for _, op := range ops {
		if op.Outcome == OK && op.Rev > 0 {
			writes[op.Key] = append(writes[op.Key], op)
		}
	}
	return func(key string, rev uint64) (int64, bool) {
		earliest, found := int64(0), false
		for _, w := range writes[key] {
			if w.Rev > rev && (!found || w.Return < earliest) {
				earliest, found = w.Return, true
			}
		}
		return earliest, found
	}
}

// illegalKeys returns the keys whose history alone no order explains.
func illegalKeys(ops []Op, ttl time.Duration) []string {
	byKey := map[string][]Op{}
	for _, op := range ops {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	if len(byKey) == 1 {
		return slices.Collect(maps.Keys(byKey))
	}
	var illegal []string
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		if Check(byKey[key], ttl, time.Minute).Linearizable == "false" {
			illegal = append(illegal, key)
		}
	}
	return illegal
}

// Visualize writes Porcupine's page of the history to path, with windows
// marked as a row of their own.
func (r Result) Visualize(path string, windows []Window) error {
	var notes []porcupine.Annotation
	for _, w := range windows {
		notes = append(notes, porcupine.Annotation{
			Tag:             "faults",
			Start:           w.Start,
			End:             w.End,
			Description:     w.Name,
			Details:         fmt.Sprintf("%s: %v to %v after the first call", w.Name, time.Duration(w.Start-r.base), time.Duration(w.End-r.base)),
			BackgroundColor: "#f7c6c6",
		})
	}
	r.info.AddAnnotations(notes)
	return porcupine.VisualizePath(r.model, r.info, path)
}

// state is what the model knows of one key.
type state struct {
	live    bool   // it holds a value, not a marker or nothing
	rev     uint64 // its latest revision if known; else a revision it is above
	known   bool   // rev is exact
	empty   bool   // with !known: it may also hold nothing at all (its entry aged out)
	written int64  // when the write of its entry (value or marker) was sent: it may age out a TTL later
}

// ages reports whether the key holds an entry that ages out: a value, or a
// marker. The bucket's MaxAge removes both; then the key has no entry.
func (s state) ages() bool { return s.live || !s.known && !s.empty }

func (s state) String() string {
	what := "no value"
	if s.live {
		what = "value"
	}
	switch {
	case s.known:
		return fmt.Sprintf("%s at rev %d", what, s.rev)
	case s.empty:
		return fmt.Sprintf("%s above rev %d, or nothing", what, s.rev)
	}
	return fmt.Sprintf("%s above rev %d", what, s.rev)
}

// model returns the model of one key, partitioned by key.
func model(ttl time.Duration) porcupine.Model {
	m := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			for _, op := range history {
				key := op.Input.(Op).Key
				byKey[key] = append(byKey[key], op)
			}
			var parts [][]porcupine.Operation
			for _, key := range slices.Sorted(maps.Keys(byKey)) {
				parts = append(parts, byKey[key])
			}
			return parts
		},
		Init: func() []any { return []any{state{known: true}} },
		Step: func(s, input, output any) []any {
			return step(s.(state), input.(Op), output.(Outcome), ttl)
		},
		Equal: func(a, b any) bool { return a.(state) == b.(state) },
		DescribeOperation: func(input, output any) string {
			op := input.(Op)
			desc := string(op.Kind)
			if op.Expected > 0 {
				desc += fmt.Sprintf(" over %d", op.Expected)
			}
			desc += " → " + string(output.(Outcome))
			if op.Rev > 0 {
				desc += fmt.Sprintf(" rev %d", op.Rev)
			}
			return op.Client + ": " + desc
		},
		DescribeState: func(s any) string { return s.(state).String() },
	}
	return m.ToModel()
}

// step returns the states the key may be in after op returned outcome in
// state s; none if it cannot have.
func step(s state, op Op, outcome Outcome, ttl time.Duration) []any {
	now := []state{s}
	ret := op.Return
	if outcome == Unknown {
		ret = math.MaxInt64
	}
	if s.ages() && ret-s.written >= int64(ttl) { // it may have aged out first: nothing, or an expiry marker
		now = append(now, state{rev: s.rev, empty: true})
	}
	var next []any
	for _, s := range now {
		if outcome != OK {
			if outcome == Unknown || refuses(s, op) {
				next = append(next, s) // refused, or not applied (yet)
			}
		}
		if outcome != Conflict && accepts(s, op) && (outcome != OK || op.Rev > s.rev || marker(op)) {
			next = append(next, applied(s, op, outcome))
		}
	}
	return next
}

// accepts reports whether the key in state s may take op.
func accepts(s state, op Op) bool {
	switch {
	case op.Unrecorded:
		return true
	}
	switch op.Kind {
	case Create:
		return !s.live
	case Update:
		return matches(s, op.Expected)
	case Delete, Purge:
		return op.Expected == 0 || matches(s, op.Expected)
	}
	return true // Put
}

// refuses reports whether the key in state s may refuse op.
func refuses(s state, op Op) bool {
	switch {
	case op.Unrecorded:
		return true
	}
	switch op.Kind {
	case Create:
		return s.live
	case Update:
		return !s.known || s.rev != op.Expected
	case Delete, Purge:
		return op.Expected > 0 && (!s.known || s.rev != op.Expected)
	}
	return false // Put
}

// matches reports whether the key's latest revision may be rev (0: it
// holds nothing at all).
func matches(s state, rev uint64) bool {
	if s.known {
		return s.rev == rev
	}
	return rev > s.rev || s.empty && rev == 0
}

// marker reports whether op writes a marker, whose revision the caller is
// not told.
func marker(op Op) bool { return op.Kind == Delete || op.Kind == Purge }

// applied is the state after op took effect with outcome in state s: an OK
// write's revision is above s.rev.
func applied(s state, op Op, outcome Outcome) state {
	switch {
	case marker(op):
		return state{rev: s.rev, written: op.Call}
	case outcome == OK:
		return state{live: true, rev: op.Rev, known: true, written: op.Call}
	}
	return state{live: true, rev: s.rev, written: op.Call} // applied unseen, at a revision above s.rev
}

// orderProblems checks the revisions the server handed out: no revision
// given twice, and a write that returned before another was sent has the
// lower revision (one stream orders every key of a bucket).
func orderProblems(ops []Op) []string {
	var writes []Op
	for _, op := range ops {
		if op.Outcome == OK && op.Rev > 0 {
			writes = append(writes, op)
		}
	}
	var problems []string
	note := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	byRev := map[uint64]Op{}
	for _, w := range writes {
		if other, ok := byRev[w.Rev]; ok {
			note("revision %d given twice: %s", w.Rev, describePair(other, w))
		}
		byRev[w.Rev] = w
	}
	// Sweep by time: every write returned before w was sent must have a
	// lower revision than w.
	byReturn := slices.SortedFunc(slices.Values(writes), func(a, b Op) int { return cmp.Compare(a.Return, b.Return) })
	byCall := slices.SortedFunc(slices.Values(writes), func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
	var highest Op
	i := 0
	for _, w := range byCall {
		for ; i < len(byReturn) && byReturn[i].Return < w.Call; i++ {
			if byReturn[i].Rev > highest.Rev {
				highest = byReturn[i]
			}
		}
		if highest.Rev >= w.Rev {
			note("revision %d was given after revision %d had been returned: %s", w.Rev, highest.Rev, describePair(highest, w))
		}
	}
	return problems
}

func describePair(a, b Op) string {
	return fmt.Sprintf("%s %s %q (rev %d) and %s %s %q (rev %d)", a.Client, a.Kind, a.Key, a.Rev, b.Client, b.Kind, b.Key, b.Rev)
}

// Summary is one line on the result.
func (r Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d KV operations on %d keys: linearizable %s (%v)", r.Ops, r.Keys, r.Linearizable, r.Took.Round(time.Millisecond))
	if len(r.Illegal) > 0 {
		fmt.Fprintf(&b, "; not linearizable: %s", strings.Join(r.Illegal, ", "))
	}
	if len(r.Order) > 0 {
		fmt.Fprintf(&b, "; %d revision-order problems, first: %s", len(r.Order), r.Order[0])
	}
	return b.String()
}
