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
}

func (e entry) Bucket() string                  { return "B" }
func (e entry) Key() string                     { return "k" }
func (e entry) Value() []byte                   { return []byte(e.value) }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

func TestKeyViewTellsHowTheKeyBecameFree(t *testing.T) {
	t.Parallel()
	put := jetstream.KeyValuePut
	tests := []struct {
		name    string
		entries []jetstream.KeyValueEntry
		free    bool
		want    predecessor
	}{
		{"no key", nil, true, predecessorNone},
		{"held", []jetstream.KeyValueEntry{entry{1, put, "a"}}, false, predecessorEarly},
		{"released by the holder", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, put, "released:a"}}, true, predecessorReleased},
		{"release with its holder unseen", []jetstream.KeyValueEntry{entry{2, put, "released:a"}}, true, predecessorReleased},
		{"deleted", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, jetstream.KeyValueDelete, ""}}, true, predecessorEarly},
		{"purged or expired", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, jetstream.KeyValuePurge, ""}}, true, predecessorEarly},
		{"marked draining by the holder", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, jetstream.KeyValueDelete, ""}, entry{3, put, "draining:a for 1.5s"}}, true, predecessorDrained},
		{"redelivered entries ignored", []jetstream.KeyValueEntry{entry{1, put, "a"}, entry{2, put, "released:a"}, entry{1, put, "a"}}, true, predecessorReleased},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v keyView
			for _, e := range tt.entries {
				v.advance(e, time.Now())
			}
			v.advance(nil, time.Now()) // the watcher's end of initial values
			if v.free() != tt.free {
				t.Fatalf("free() = %v, want %v", v.free(), tt.free)
			}
			if got := v.classify(); tt.free && got != tt.want {
				t.Errorf("classify() = %v, want %v", got, tt.want)
			}
		})
	}
}
