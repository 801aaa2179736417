package election

import (
	"bytes"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// keyView is what a node knows of the key from its watcher: the latest entry,
// which tells whether the key is free and how it came to be.
type keyView struct {
	ready  bool                    // the watcher delivered the key's initial state
	latest jetstream.KeyValueEntry // nil: no entry known
	seenAt time.Time               // when latest arrived, on the local clock
	// rec is latest read as a candidate record (nil: it is none), once
	// parsed is true: a record is read each time a candidate's campaign
	// wakes, and parsed once per entry.
	rec    *candidateRecord
	parsed bool
}

// set makes e, seen at now, the latest entry.
func (v *keyView) set(e jetstream.KeyValueEntry, now time.Time) {
	v.latest, v.seenAt, v.rec, v.parsed = e, now, nil, false
}

// record returns the latest entry read as a live candidate record (see
// recordOf), parsing it at most once.
func (v *keyView) record() (*candidateRecord, bool) {
	if !v.parsed {
		v.rec, v.parsed = recordOf(v.latest), true
	}
	return v.rec, v.rec != nil
}

// writer returns the writer the latest entry names as a candidate record
// (zero if it is none).
func (v *keyView) writer() Writer {
	if r, ok := v.record(); ok {
		return r.Writer
	}
	return Writer{}
}

// advance records an entry the watcher delivered at now (nil: the end of
// its initial state) and reports whether the view changed. Revisions the
// view has passed are ignored.
func (v *keyView) advance(e jetstream.KeyValueEntry, now time.Time) bool {
	if e == nil {
		changed := !v.ready
		v.ready = true
		return changed
	}
	if v.latest != nil && (e.Revision() < v.latest.Revision() || sameEntry(e, v.latest)) {
		return false
	}
	v.set(e, now)
	return true
}

// sameEntry reports whether a and b are one write: the same revision with
// the same operation and value. A store that lost a write can give its
// revision to another.
func sameEntry(a, b jetstream.KeyValueEntry) bool {
	return a.Revision() == b.Revision() && a.Operation() == b.Operation() && bytes.Equal(a.Value(), b.Value())
}

// replace sets the view to what a new watcher found for the key at now
// (nil: no entry, so the key aged out if it ever existed) and reports
// whether the view changed. An unchanged entry keeps the time it was first
// seen.
func (v *keyView) replace(e jetstream.KeyValueEntry, now time.Time) bool {
	switch {
	case e == nil:
		changed := v.latest != nil
		v.set(nil, time.Time{})
		return changed
	case v.latest != nil && sameEntry(e, v.latest):
		return false
	}
	v.set(e, now)
	return true
}

// held reports whether a candidate holds the key, by the latest entry: a
// release or a draining mark says its writer has stood down.
func (v *keyView) held() bool {
	return v.latest != nil && v.latest.Operation() == jetstream.KeyValuePut && !isRelease(v.latest.Value()) && !isDraining(v.latest.Value())
}

// free reports whether the key can be claimed over its latest entry: nothing
// is there (once the initial state is known), or a delete, purge, expiry
// marker, release or draining mark is (a draining mark only once the time
// it names has passed: campaigner.claimableAt).
func (v *keyView) free() bool {
	return v.ready && !v.held()
}

// expected is the revision a claim must find as the key's last.
func (v *keyView) expected() uint64 {
	if v.latest == nil {
		return 0
	}
	return v.latest.Revision()
}

// predecessor tells how the key became free. What replaced a holder decides
// how long a winner must wait before it announces: the holder may still
// believe it leads until its validity deadline, unless the key's history
// proves it has stood down.
type predecessor int

const (
	// predecessorEarly: a delete, a purge or an expiry marker, or a release
	// the node cannot attribute. A delete or purge may have come before the
	// holder's TTL ran out, and the watcher cannot tell an expiry marker from
	// a purge, nor prove it missed no renewal in between: wait a full TTL.
	predecessorEarly predecessor = iota
	// predecessorNone: no entry at all. The key never existed, or its last
	// write aged out, which the server does only a TTL after that write.
	predecessorNone
	// predecessorReleased: the holder's own release, which it writes only
	// after standing down.
	predecessorReleased
	// predecessorDrained: the draining mark of a holder that saw its key
	// removed and stood down, claimed over only once its work deadline has
	// passed (drain.go).
	predecessorDrained
)

func (p predecessor) String() string {
	return [...]string{"removal", "no key", "release", "drain"}[p]
}

// classify tells how the key became free, for a claim over v.expected(). A
// release is written by compare-and-set over its writer's own latest
// revision, so it proves the holder right before it stood down, whatever the
// watcher saw before it.
func (v *keyView) classify() predecessor {
	switch {
	case v.latest == nil:
		return predecessorNone
	case v.latest.Operation() == jetstream.KeyValuePut && isRelease(v.latest.Value()):
		return predecessorReleased
	case v.latest.Operation() == jetstream.KeyValuePut && isDraining(v.latest.Value()):
		return predecessorDrained
	default:
		return predecessorEarly
	}
}

// handoffTo returns the candidate a handoff names, if the latest entry is
// one.
func (v *keyView) handoffTo() (string, bool) {
	if v.latest == nil || v.latest.Operation() != jetstream.KeyValuePut {
		return "", false
	}
	return handoffTarget(string(v.latest.Value()))
}
