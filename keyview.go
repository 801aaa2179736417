package election

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// releasePrefix starts the value a leader writes over its own key when it
// stops: "released:" and its name. Names are never empty, so no holder's
// value can be mistaken for a release of the holder it follows.
const releasePrefix = "released:"

// keyView is what a node knows of the key from its watcher: the latest entry
// and the one before it, which together tell whether the key is free and how
// it came to be.
type keyView struct {
	ready    bool                    // the watcher delivered the key's initial state
	latest   jetstream.KeyValueEntry // nil: no entry known
	previous jetstream.KeyValueEntry // the entry latest replaced, if the watcher saw it
	seenAt   time.Time               // when latest arrived, on the local clock
}

func (v *keyView) observe(e jetstream.KeyValueEntry) {
	if e == nil {
		v.ready = true
		return
	}
	if v.latest != nil && e.Revision() <= v.latest.Revision() {
		return // redelivered after a watcher reset
	}
	v.previous, v.latest, v.seenAt = v.latest, e, time.Now()
}

// held reports whether a candidate holds the key, by the latest entry.
func (v *keyView) held() bool {
	return v.latest != nil && v.latest.Operation() == jetstream.KeyValuePut && !isRelease(v.latest.Value())
}

// free reports whether the key can be claimed over its latest entry: nothing
// is there (once the initial state is known), or a delete, purge, expiry
// marker or release is.
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
)

func (p predecessor) String() string {
	return [...]string{"removal", "no key", "release"}[p]
}

// classify tells how the key became free, for a claim over v.expected(). A
// release proves the holder stood down even if the watcher missed entries
// before it: any holder between the one named and the release ended its
// tenure before the named one claimed again.
func (v *keyView) classify() predecessor {
	switch {
	case v.latest == nil:
		return predecessorNone
	case v.latest.Operation() == jetstream.KeyValuePut && isRelease(v.latest.Value()) &&
		v.previous != nil && v.previous.Operation() == jetstream.KeyValuePut &&
		strings.TrimPrefix(string(v.latest.Value()), releasePrefix) == string(v.previous.Value()):
		return predecessorReleased
	default:
		return predecessorEarly
	}
}

func isRelease(value []byte) bool {
	return strings.HasPrefix(string(value), releasePrefix)
}
