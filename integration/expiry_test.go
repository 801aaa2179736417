package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestKeysNeverExpireEarly checks what the election's safety rests on: the
// server never removes a key before its TTL has passed since the write. It
// logs how late removal came (go test -v -run NeverExpire ./integration).
func TestKeysNeverExpireEarly(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	for _, storage := range []jetstream.StorageType{jetstream.FileStorage, jetstream.MemoryStorage} {
		t.Run(storage.String(), func(t *testing.T) {
			t.Parallel()
			const ttl = time.Second
			kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{
				Bucket: "EXPIRY_" + storage.String(), TTL: ttl, Storage: storage,
			})
			ctx := context.Background()
			for i := range 3 {
				key := fmt.Sprintf("k%d", i)
				if _, err := kv.Create(ctx, key, []byte("x")); err != nil {
					t.Fatal(err)
				}
				written, err := kv.Get(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				for {
					_, err := kv.Get(ctx, key)
					if errors.Is(err, jetstream.ErrKeyNotFound) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					time.Sleep(5 * time.Millisecond) // sampling, not synchronisation
				}
				lag := time.Since(written.Created()) - ttl
				if lag < 0 {
					t.Errorf("%s expired %v before its TTL", key, -lag)
				}
				t.Logf("%s storage: gone %v after its TTL", storage, lag.Round(time.Millisecond))
			}
		})
	}
}
