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

// TestAValueReplacedBeforeAConsumerGotThereIsSkipped pins down what
// Observe's documentation and the tests' watchers rest on: on a bucket that
// keeps one revision per key, the server delivers only the values it still
// holds. A consumer that has not yet reached a value when the next write
// replaces it never sees it; a release followed at once by the next claim
// reaches a watcher as the claim alone.
func TestAValueReplacedBeforeAConsumerGotThereIsSkipped(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SKIP", TTL: ttl})
	ctx := context.Background()
	held, err := kv.Create(ctx, "k", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	// A consumer that has delivered the holder's write and not yet fetched on.
	c, err := js.CreateConsumer(ctx, "KV_SKIP", jetstream.ConsumerConfig{
		FilterSubject: "$KV.SKIP.k", DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq: held + 1, AckPolicy: jetstream.AckNonePolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	released, err := kv.Update(ctx, "k", []byte("released:a"), held)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := kv.Update(ctx, "k", []byte("b"), released)
	if err != nil {
		t.Fatal(err)
	}

	batch, err := c.Fetch(10, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for m := range batch.Messages() {
		meta, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, meta.Sequence.Stream)
	}
	if len(got) != 1 || got[0] != claimed {
		t.Errorf("the consumer delivered revisions %v after the release %d was replaced by the claim %d; want only %d",
			got, released, claimed, claimed)
	}
}
