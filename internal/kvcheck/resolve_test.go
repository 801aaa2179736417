package kvcheck

import (
	"reflect"
	"testing"
	"time"
)

// claim is the entry a claim of key by value wrote at rev, over expected.
func claim(rev uint64, key, value string, expected uint64) Entry {
	return Entry{Rev: rev, Key: key, Kind: Put, Value: value, Conditional: true, Expected: expected}
}

// valued is at with the value a write wrote.
func valued(op Op, value string) Op {
	op.Value = value
	return op
}

// TestResolveSettlesCallsOfUnknownOutcome resolves small histories against
// hand-written records of the stream.
func TestResolveSettlesCallsOfUnknownOutcome(t *testing.T) {
	lost := valued(at("b", "k", Create, 2, 0, Unknown, 0, 0), "b")
	tests := []struct {
		name    string
		ops     []Op
		stream  Stream
		want    Resolved
		outcome Outcome // of the unknown call, if it stays in the history
		rev     uint64
		before  int64 // ms
	}{
		{"no entry of the call: it had no effect", []Op{
			valued(at("a", "k", Create, 0, 1, OK, 1, 0), "a"), lost,
			valued(at("a", "k", Update, 3, 4, OK, 2, 1), "a"),
		}, Stream{Entries: []Entry{claim(1, "k", "a", 0), claim(2, "k", "a", 0)}, Last: 2},
			Resolved{Unknown: 1, NotApplied: 1}, "", 0, 0},
		{"an entry of another value, key or condition proves nothing of the call", []Op{
			valued(at("a", "k", Create, 0, 1, OK, 1, 0), "a"), lost,
			valued(at("c", "k", Update, 3, 4, OK, 2, 1), "c"),
			valued(at("c", "j", Create, 3, 4, OK, 3, 0), "b"),
			valued(at("d", "k", Update, 5, 6, OK, 5, 2), "b"),
		}, Stream{Entries: []Entry{claim(1, "k", "a", 0), claim(2, "k", "c", 1), claim(3, "j", "b", 0), {Rev: 4, Key: "k", Kind: Put, Value: "b"}, claim(5, "k", "b", 2)}, Last: 5},
			Resolved{Unknown: 1, NotApplied: 1, Unexplained: []string{`revision 4 of "k" (put "b") was written by no recorded call`}}, "", 0, 0},
		{"an entry written before the call was sent is not the call's", []Op{
			valued(at("e", "k", Create, 0, 0, Unknown, 0, 0), "b"),
			valued(at("a", "k", Update, 0, 1, OK, 2, 1), "a"), lost,
		}, Stream{Entries: []Entry{claim(1, "k", "b", 0), claim(2, "k", "a", 1)}, Last: 2},
			Resolved{Unknown: 2, NotApplied: 1, Bounded: 1, Applied: 1}, "", 0, 0},
		{"the call's entry, and a later write: it took effect at that revision, before the write returned", []Op{
			valued(at("a", "k", Create, 0, 1, OK, 1, 0), "a"), lost,
			valued(at("a", "k", Update, 3, 9, Conflict, 0, 1), "a"),
			valued(at("c", "j", Create, 5, 7, OK, 3, 0), "c"),
		}, Stream{Entries: []Entry{claim(1, "k", "a", 0), claim(2, "k", "b", 0)}, Last: 3},
			Resolved{Unknown: 1, Bounded: 1, Applied: 1}, OK, 2, 7},
		{"the call's entry and no later write: unbounded", []Op{
			valued(at("a", "k", Create, 0, 1, OK, 1, 0), "a"), lost,
		}, Stream{Entries: []Entry{claim(1, "k", "a", 0), claim(2, "k", "b", 0)}, Last: 2},
			Resolved{Unknown: 1}, Unknown, 0, 0},
		{"a revision nobody saw may be the call's", []Op{
			valued(at("a", "k", Create, 0, 1, OK, 1, 0), "a"), lost,
			valued(at("c", "j", Create, 5, 7, OK, 4, 0), "c"),
		}, Stream{Entries: []Entry{claim(1, "k", "a", 0)}, Last: 4},
			Resolved{Unknown: 1, Bounded: 1, Gaps: 2}, Unknown, 0, 7},
		{"an entry two calls may have written is neither's for sure", []Op{
			valued(at("a", "k", Create, 0, 1, OK, 1, 0), "a"), lost,
			valued(at("b", "k", Create, 3, 0, Unknown, 0, 0), "b"),
			valued(at("c", "j", Create, 5, 7, OK, 3, 0), "c"),
		}, Stream{Entries: []Entry{claim(1, "k", "a", 0), claim(2, "k", "b", 0)}, Last: 3},
			Resolved{Unknown: 2, Bounded: 2}, Unknown, 0, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, r := Resolve(tt.ops, tt.stream)
			if !reflect.DeepEqual(r, tt.want) {
				t.Errorf("resolved %+v, want %+v", r, tt.want)
			}
			var got *Op
			for i := range out {
				if out[i].Client == "b" {
					got = &out[i]
				}
			}
			switch {
			case tt.outcome == "" && got != nil:
				t.Fatalf("the call stayed in the history: %+v", *got)
			case tt.outcome == "":
				return
			case got == nil:
				t.Fatalf("the call was left out of the history")
			}
			if got.Outcome != tt.outcome || got.Rev != tt.rev {
				t.Errorf("the call: %s at rev %d, want %s at rev %d", got.Outcome, got.Rev, tt.outcome, tt.rev)
			}
			bound := got.Before
			if got.Outcome == OK {
				bound = got.Return
			}
			if bound != tt.before*1e6 && !(tt.before == 0 && bound == got.Return) {
				t.Errorf("the call is bounded at %v, want %v ms", time.Duration(bound), tt.before)
			}
		})
	}
}

// TestResolvedHistoryStillFailsOnABrokenStore: a store that lets a claim
// win over a live value but answers it with a timeout goes unnoticed
// without the stream's record, as the call may never have taken effect;
// with the record, the call is shown to have taken effect, and the history
// fails.
func TestResolvedHistoryStillFailsOnABrokenStore(t *testing.T) {
	ops := []Op{
		valued(at("a", "k", Create, 0, 1, OK, 1, 0), "a"),
		valued(at("b", "k", Create, 2, 0, Unknown, 0, 0), "b"), // taken over a's live value
		valued(at("a", "k", Update, 4, 5, Conflict, 0, 1), "a"),
		valued(at("c", "j", Create, 6, 7, OK, 3, 0), "c"),
	}
	if r := Check(ops, ttl, time.Minute); r.Linearizable != "true" {
		t.Fatalf("without the stream's record: %s, want linearizable (the claim may never have taken effect)", r.Summary())
	}
	stream := Stream{Entries: []Entry{claim(1, "k", "a", 0), claim(2, "k", "b", 0), claim(3, "j", "c", 0)}, Last: 3}
	resolved, _ := Resolve(ops, stream)
	if r := Check(resolved, ttl, time.Minute); r.Linearizable != "false" {
		t.Errorf("with the stream's record: %s, want not linearizable", r.Summary())
	}
}

// TestResolveWithoutARecordChangesNothing: with no record of the stream,
// no call of unknown outcome can be shown to have had no effect.
func TestResolveWithoutARecordChangesNothing(t *testing.T) {
	ops := []Op{valued(at("a", "k", Create, 0, 1, OK, 1, 0), "a"), valued(at("b", "k", Create, 2, 0, Unknown, 0, 0), "b")}
	out, r := Resolve(ops, Stream{})
	if len(out) != 2 || out[1] != ops[1] || !reflect.DeepEqual(r, Resolved{Unknown: 1}) {
		t.Errorf("resolved %+v into %+v, want the history unchanged", r, out)
	}
}
