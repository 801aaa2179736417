package election

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// entry is a KV entry as the watcher delivers it.
type entry struct {
	rev   uint64
	op    jetstream.KeyValueOp
	value string
	at    time.Duration // when the server wrote it, after t0
}

// t0 is an arbitrary server time.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (e entry) Bucket() string                  { return "B" }
func (e entry) Key() string                     { return "k" }
func (e entry) Value() []byte                   { return []byte(e.value) }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return t0.Add(e.at) }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

func TestKeyViewTellsHowTheKeyBecameFree(t *testing.T) {
	put := jetstream.KeyValuePut
	const ttl = 10 * time.Second
	tests := []struct {
		name    string
		entries []jetstream.KeyValueEntry
		free    bool
		want    predecessor
	}{
		{"no key", nil, true, predecessorNone},
		{"held", []jetstream.KeyValueEntry{entry{1, put, "a", 0}}, false, predecessorEarly},
		{"released by the holder", []jetstream.KeyValueEntry{entry{1, put, "a", 0}, entry{2, put, "released:a", 0}}, true, predecessorReleased},
		{"release with its holder unseen", []jetstream.KeyValueEntry{entry{2, put, "released:a", 0}}, true, predecessorReleased},
		{"deleted", []jetstream.KeyValueEntry{entry{1, put, "a", 0}, entry{2, jetstream.KeyValueDelete, "", 0}}, true, predecessorEarly},
		{"purged or expired", []jetstream.KeyValueEntry{entry{1, put, "a", 0}, entry{2, jetstream.KeyValuePurge, "", 0}}, true, predecessorEarly},
		{"purged or expired a TTL after the write before", []jetstream.KeyValueEntry{entry{1, put, "a", 0}, entry{2, jetstream.KeyValuePurge, "", ttl}}, true, predecessorAgedOut},
		{"deleted a TTL after a release", []jetstream.KeyValueEntry{entry{1, put, "released:a", 0}, entry{2, jetstream.KeyValueDelete, "", ttl + time.Second}}, true, predecessorAgedOut},
		{"expired within a TTL of the write before (a shorter per-key TTL)", []jetstream.KeyValueEntry{entry{1, put, "a", 0}, entry{2, jetstream.KeyValuePurge, "", ttl - time.Millisecond}}, true, predecessorEarly},
		{"redelivered entries ignored", []jetstream.KeyValueEntry{entry{1, put, "a", 0}, entry{2, put, "released:a", 0}, entry{1, put, "a", 0}}, true, predecessorReleased},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v keyView
			for _, e := range tt.entries {
				v.observe(e)
			}
			v.observe(nil) // the watcher's end of initial values
			if v.free() != tt.free {
				t.Fatalf("free() = %v, want %v", v.free(), tt.free)
			}
			if got := v.classify(ttl); tt.free && got != tt.want {
				t.Errorf("classify() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestKeyViewForgetsThePreviousEntryOnReplace(t *testing.T) {
	const ttl = 10 * time.Second
	var v keyView
	v.observe(entry{1, jetstream.KeyValuePut, "a", 0})
	v.observe(nil)
	// A new watcher finds a purge marker: what came between it and revision
	// 1 is unknown, so the marker proves nothing.
	v.replace(entry{5, jetstream.KeyValuePurge, "", ttl})
	if got := v.classify(ttl); got != predecessorEarly {
		t.Errorf("classify() after replace = %v, want %v", got, predecessorEarly)
	}
}
