package integration

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

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
