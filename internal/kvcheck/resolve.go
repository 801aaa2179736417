package kvcheck

import (
	"cmp"
	"fmt"
	"slices"
)

// Entry is one message of the bucket's stream as its leader stored it: the
// stream's own record of a write, with the revision it was given and the
// condition the write was sent with.
type Entry struct {
	Rev   uint64
	Key   string
	Kind  Kind   // Put for a value, whichever call wrote it; Delete or Purge for a marker a call wrote; "" for one the server wrote
	Value string // a value's bytes
	// Conditional: the write required the key's last revision to be
	// Expected (0: no entry at all), as Create, Update and a Delete or
	// Purge with a revision do; a Put does not.
	Conditional bool
	Expected    uint64
}

// Stream is what was recorded of the bucket's stream: the entries seen, in
// any order and possibly with some missing, and the last revision the
// stream gave before the recording ended.
type Stream struct {
	Entries []Entry
	Last    uint64
}

// Resolved is what Resolve settled.
type Resolved struct {
	Unknown    int // calls of unknown outcome
	NotApplied int // of them, shown to have had no effect, and left out of the history
	Bounded    int // of them, shown to have taken effect, if at all, before a later call returned
	Applied    int // of those, shown to have taken effect, at the revision of an entry only they can have written
	Gaps       int // revisions up to Stream.Last neither seen nor returned to a call
	// Unexplained lists, at most 20, the entries no recorded call can have
	// written: a write nobody made, or one the recording missed.
	Unexplained []string
}

// Resolve settles calls of unknown outcome from the stream's own record of
// its writes, as etcd's robustness tests do with a watch: every write gets
// the next revision of the stream, so a call that took effect is an entry
// at a revision above every revision returned before the call was sent,
// with the call's key, kind, value and condition. A call with no such
// entry, and no unrecorded revision it could be, took no effect and is left
// out. A call whose possible entries all lie at or below a revision r took
// effect, if at all, before any write above r returned, and Op.Before says
// so; if that is one value's entry which no other call can have written,
// the call took effect, at that entry's revision. Without the bound each
// such call stays pending to the end of the history, where every moment
// the key is free lets it apply, and a long history with many of them
// outgrows any search.
//
// The resolution trusts the stream's record as the check trusts returned
// revisions. It cannot hide a write the stream holds: an entry that a call
// could have written keeps that call in the history, and an entry that no
// call can have written is reported. A Stream whose Last is 0 records
// nothing, and ops come back as they are.
func Resolve(ops []Op, s Stream) ([]Op, Resolved) {
	var r Resolved
	if s.Last == 0 {
		for _, op := range ops {
			if op.Outcome == Unknown {
				r.Unknown++
			}
		}
		return ops, r
	}
	known := map[uint64]bool{}
	var writes []Op
	for _, op := range ops {
		if op.Outcome == OK && op.Rev > 0 {
			known[op.Rev] = true
			writes = append(writes, op)
		}
	}
	seen := map[uint64]bool{}
	var unclaimed []Entry // entries no returned revision accounts for
	for _, e := range s.Entries {
		if seen[e.Rev] {
			continue
		}
		seen[e.Rev] = true
		if !known[e.Rev] {
			unclaimed = append(unclaimed, e)
		}
	}
	var gaps []uint64
	for rev := uint64(1); rev <= s.Last; rev++ {
		if !seen[rev] && !known[rev] {
			gaps = append(gaps, rev)
		}
	}
	r.Gaps = len(gaps)
	below := revisionsReturnedBefore(writes)
	firstAbove := firstReturnAbove(writes)

	// The entries each call of unknown outcome may have written, and the
	// calls each entry may have been written by: those of unknown outcome,
	// and a Delete or Purge that returned without its revision.
	entriesOf := map[int][]Entry{}
	writers := map[uint64]int{}
	explained := map[uint64]bool{}
	for i, op := range ops {
		if op.Outcome == Conflict || op.Outcome == OK && op.Rev > 0 {
			continue
		}
		floor := below(op.Call)
		for _, e := range unclaimed {
			if e.Rev > floor && couldHaveWritten(op, e) {
				explained[e.Rev] = true
				if op.Outcome == Unknown {
					entriesOf[i] = append(entriesOf[i], e)
					writers[e.Rev]++
				}
			}
		}
	}
	for _, e := range unclaimed {
		if e.Kind != "" && !explained[e.Rev] && len(r.Unexplained) < 20 {
			r.Unexplained = append(r.Unexplained, fmt.Sprintf("revision %d of %q (%s %q) was written by no recorded call", e.Rev, e.Key, e.Kind, e.Value))
		}
	}

	out := make([]Op, 0, len(ops))
	for i, op := range ops {
		if op.Outcome != Unknown {
			out = append(out, op)
			continue
		}
		r.Unknown++
		entries := entriesOf[i]
		gap := len(gaps) > 0 && gaps[len(gaps)-1] > below(op.Call)
		if len(entries) == 0 && !gap {
			r.NotApplied++
			continue
		}
		highest := uint64(0)
		for _, e := range entries {
			highest = max(highest, e.Rev)
		}
		if gap {
			highest = max(highest, gaps[len(gaps)-1])
		}
		by, bounded := firstAbove(highest)
		if bounded {
			op.Before = max(by, op.Call+1)
			r.Bounded++
		}
		// A value's entry that only this call can have written, when no
		// unrecorded revision could be the call's instead, is the call's:
		// it took effect, at that revision. Create, Update and Put return
		// the revision they wrote, so no call that returned wrote it.
		if e := entries; len(e) == 1 && !gap && bounded && e[0].Kind == Put && writers[e[0].Rev] == 1 {
			op.Outcome, op.Rev, op.Return, op.Before = OK, e[0].Rev, op.Before, 0
			r.Applied++
		}
		out = append(out, op)
	}
	return out, r
}

// couldHaveWritten reports whether op, had it taken effect, may have written
// entry e: the same key, kind, value and condition.
func couldHaveWritten(op Op, e Entry) bool {
	if op.Key != e.Key {
		return false
	}
	switch op.Kind {
	case Create: // over no entry, or over a delete or purge marker's revision
		return e.Kind == Put && e.Value == op.Value && e.Conditional
	case Update:
		return e.Kind == Put && e.Value == op.Value && e.Conditional && e.Expected == op.Expected
	case Put:
		return e.Kind == Put && e.Value == op.Value && !e.Conditional
	}
	switch {
	case e.Kind != op.Kind:
		return false
	case op.Unrecorded:
		return true
	case op.Expected == 0:
		return !e.Conditional
	}
	return e.Conditional && e.Expected == op.Expected
}

// revisionsReturnedBefore returns, for a time t, the highest revision
// returned to a write before t: a call sent at t that took effect has a
// revision above it.
func revisionsReturnedBefore(writes []Op) func(t int64) uint64 {
	byReturn := slices.SortedFunc(slices.Values(writes), func(a, b Op) int { return cmp.Compare(a.Return, b.Return) })
	highest := make([]uint64, len(byReturn))
	for i, w := range byReturn {
		highest[i] = w.Rev
		if i > 0 {
			highest[i] = max(highest[i], highest[i-1])
		}
	}
	return func(t int64) uint64 {
		i, _ := slices.BinarySearchFunc(byReturn, t, func(w Op, t int64) int { return cmp.Compare(w.Return, t) })
		if i == 0 {
			return 0
		}
		return highest[i-1]
	}
}

// firstReturnAbove returns, for a revision r, the earliest return of a write
// given a revision above r: every write at or below r took effect before it.
func firstReturnAbove(writes []Op) func(r uint64) (int64, bool) {
	byRev := slices.SortedFunc(slices.Values(writes), func(a, b Op) int { return cmp.Compare(a.Rev, b.Rev) })
	earliest := make([]int64, len(byRev)) // earliest[i]: the earliest return among byRev[i:]
	for i := len(byRev) - 1; i >= 0; i-- {
		earliest[i] = byRev[i].Return
		if i+1 < len(byRev) {
			earliest[i] = min(earliest[i], earliest[i+1])
		}
	}
	return func(r uint64) (int64, bool) {
		i, _ := slices.BinarySearchFunc(byRev, r+1, func(w Op, r uint64) int { return cmp.Compare(w.Rev, r) })
		if i == len(byRev) {
			return 0, false
		}
		return earliest[i], true
	}
}
