package election

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestCheckStreamWarnsOfATTLTooShortForAStreamLeaderElection checks the
// warning for replicated buckets whose leaders cannot ride out a
// stream-leader election, and its absence where they can or where there is
// no election.
func TestCheckStreamWarnsOfATTLTooShortForAStreamLeaderElection(t *testing.T) {
	if got := minTTLThroughElection(); got != 11*time.Second {
		t.Errorf("smallest TTL through an election: %v, want 11s (validity 9.3 s)", got)
	}
	for _, tt := range []struct {
		replicas int
		ttl      time.Duration
		warns    bool
	}{
		{3, 5 * time.Second, true},
		{5, 10 * time.Second, true},
		{3, 11 * time.Second, false},
		{1, 2 * time.Second, false},
	} {
		_, warnings := checkStream(jetstream.StreamConfig{Name: "KV_E", Replicas: tt.replicas, MaxAge: tt.ttl, Storage: jetstream.FileStorage})
		warned := false
		for _, w := range warnings {
			if strings.Contains(w, "stream-leader election") {
				warned = true
				if !strings.Contains(w, "TTL of 11s or more") || !strings.Contains(w, tt.ttl.String()) {
					t.Errorf("R%d at TTL %v: the warning lacks the TTL or the figure: %s", tt.replicas, tt.ttl, w)
				}
			}
		}
		if warned != tt.warns {
			t.Errorf("R%d at TTL %v: warned %v, want %v (warnings %q)", tt.replicas, tt.ttl, warned, tt.warns, warnings)
		}
	}
}
