package election

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A bucket without expiry markers says nothing when a key ages out, so Leader
// and Leaders count a holder silent for a TTL as nobody.
func TestAHolderSilentForATTLHoldsNothing(t *testing.T) {
	t.Parallel()
	ttl := 2 * time.Second
	b := &Bucket{info: bucketInfo{ttl: ttl}, watcher: &watcher{clock: machineClock{}}} // the watcher's clock ages the views
	tests := []struct {
		name   string
		silent time.Duration
		want   string
	}{
		{"heard from within the TTL", ttl / 2, "a"},
		{"silent for the TTL", ttl, ""},
		{"silent for longer", time.Minute, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := keyView{ready: true, latest: entry{7, jetstream.KeyValuePut, "a"}, seenAt: time.Now().Add(-tt.silent)}
			if got := b.holderOf("k", &v); got.Name != tt.want {
				t.Errorf("holder %q after %v of silence, want %q", got.Name, tt.silent, tt.want)
			}
		})
	}
}
