package election

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAbsenceProvesExpiryOnlyWhereKeysOnlyAgeOut checks which buckets let a
// missing key prove that its last write aged out.
func TestAbsenceProvesExpiryOnlyWhereKeysOnlyAgeOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	plain := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "PLAIN", TTL: 10 * time.Second})
	markers := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "MARKERS", TTL: 10 * time.Second, LimitMarkerTTL: time.Second})
	evicting := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "EVICTING", TTL: 10 * time.Second})
	info, err := js.Stream(ctx, "KV_EVICTING")
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.CachedInfo().Config
	cfg.Discard, cfg.MaxMsgs = jetstream.DiscardOld, 100
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}

	for kv, want := range map[jetstream.KeyValue]bool{plain: true, markers: false, evicting: false} {
		e, err := NewElection(context.Background(), "m", "k", kv)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.timing.absenceProvesExpiry; got != want {
			t.Errorf("bucket %s: absence proves expiry = %v, want %v", kv.Bucket(), got, want)
		}
	}
}
