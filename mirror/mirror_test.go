package mirror_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/kvelect/election/mirror"
	"github.com/nats-io/nats.go/jetstream"
)

// natsURL is the address of the embedded server the examples use.
var natsURL string

func TestMain(m *testing.M) { testenv.VerifyNoLeaksWithServer(m, &natsURL) }

// TestMirrorIsReadOnly: what reads a mirror cannot write through it, nor
// take a Get of it for the truth, and an election on it never leads.
func TestMirrorIsReadOnly(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "EM", TTL: 2 * time.Second, Mirror: &jetstream.StreamSource{Name: "E"}})
	ctx := context.Background()
	m, err := mirror.Open(ctx, js, "EM", "E")
	if err != nil {
		t.Fatal(err)
	}
	kv := m.KeyValue()
	if _, err := kv.Put(ctx, "job", []byte("x")); err != mirror.ErrReadOnly {
		t.Errorf("Put through the mirror: %v, want %v", err, mirror.ErrReadOnly)
	}
	if _, err := kv.Get(ctx, "job"); err != mirror.ErrReadOnly {
		t.Errorf("Get through the mirror: %v, want %v", err, mirror.ErrReadOnly)
	}
	b, err := election.OpenBucket(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var won atomic.Bool
	e, err := b.NewElection("n", "job", election.WithoutSplay(), election.OnWon(func(context.Context) { won.Store(true) }))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	e.Start(runCtx)
	if won.Load() {
		t.Error("an election on the mirror led; want it never to, its claims refused")
	}
}

// TestOpenNamesBothBuckets: a bucket that is not a mirror of the one asked
// for is refused, naming both.
func TestOpenNamesBothBuckets(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "F", TTL: 2 * time.Second})
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "FM", Mirror: &jetstream.StreamSource{Name: "F"}})
	ctx := context.Background()
	_, err := mirror.Open(ctx, js, "FM", "E")
	var origin *mirror.OriginError
	if !errors.As(err, &origin) || origin.Origin != "F" || origin.Bucket != "E" {
		t.Errorf("Open of a mirror of F as one of E: %v; want an OriginError naming F and E", err)
	}
	if m, err := mirror.Open(ctx, js, "FM", "F"); err != nil || m.TTL() != 2*time.Second {
		t.Errorf("Open of a mirror that keeps keys forever: %v; want the TTL of its bucket, 2s", err)
	}
	if _, err := mirror.Open(ctx, js, "F", "E"); err == nil || err.Error() != `bucket "F" is not a mirror; want a KV mirror of bucket "E" (jetstream.KeyValueConfig{Mirror: &jetstream.StreamSource{Name: "E"}})` {
		t.Errorf("Open of a bucket that is no mirror: %v", err)
	}
}
