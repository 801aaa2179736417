package integration

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkRenew measures one leader renewal: a revision-checked Update of
// the election key, on a single server and on a 3-node cluster's R3 bucket.
// limits.go rests its margins on this round trip.
func BenchmarkRenew(b *testing.B) {
	b.Run("R1", func(b *testing.B) {
		s := testenv.Server(b)
		_, js := testenv.Connect(b, s.ClientURL())
		benchRenew(b, testenv.Bucket(b, js, jetstream.KeyValueConfig{Bucket: "B1", TTL: time.Minute}))
	})
	b.Run("R3", func(b *testing.B) {
		nodes := testenv.Cluster(b)
		_, js := testenv.Connect(b, embedded.ClientURLs(nodes))
		benchRenew(b, testenv.Bucket(b, js, jetstream.KeyValueConfig{Bucket: "B3", TTL: time.Minute, Replicas: 3}))
	})
}

func benchRenew(b *testing.B, kv jetstream.KeyValue) {
	ctx := context.Background()
	rev, err := kv.Create(ctx, "k", []byte("leader"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if rev, err = kv.Update(ctx, "k", []byte("leader"), rev); err != nil {
			b.Fatal(err)
		}
	}
}
