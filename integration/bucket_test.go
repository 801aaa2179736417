package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// fleet runs, from one Bucket, candidates elections on each of keys keys:
// as many elections as one process would hold for many roles or shards.
type fleet struct {
	bucket    *election.Bucket
	elections [][]*election.Election // by key, then candidate
	running   sync.WaitGroup
}

func startFleet(tb testing.TB, kv jetstream.KeyValue, keys, candidates int, opts ...election.Option) *fleet {
	tb.Helper()
	b, err := election.OpenBucket(context.Background(), kv, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	f := &fleet{bucket: b}
	tb.Cleanup(f.close)
	for k := range keys {
		var row []*election.Election
		for c := range candidates {
			e, err := b.NewElection(fmt.Sprintf("c-%d", c), fmt.Sprintf("shard.%d", k))
			if err != nil {
				tb.Fatal(err)
			}
			row = append(row, e)
		}
		f.elections = append(f.elections, row)
	}
	for _, row := range f.elections {
		for _, e := range row {
			f.running.Go(func() {
				if err := e.Start(context.Background()); err != nil {
					tb.Errorf("Start: %v", err)
				}
			})
		}
	}
	return f
}

// close ends every election (Close stops them) and waits for them.
func (f *fleet) close() {
	f.bucket.Close()
	f.running.Wait()
}

// count tells how many keys have no leader, and fails on a key with more
// than one.
func (f *fleet) count(tb testing.TB) (leaderless int) {
	tb.Helper()
	for k, row := range f.elections {
		n := 0
		for _, e := range row {
			if e.IsLeader() {
				n++
			}
		}
		switch {
		case n == 0:
			leaderless++
		case n > 1:
			tb.Fatalf("key shard.%d has %d leaders", k, n)
		}
	}
	return leaderless
}

// awaitAllLed polls until every key has exactly one leader.
func (f *fleet) awaitAllLed(tb testing.TB) {
	tb.Helper()
	// Polled: "every key led" has no event.
	testenv.Poll(tb, "a leader on every key", awaitTimeout, func() (string, bool) {
		n := f.count(tb)
		return fmt.Sprintf("%d keys without a leader", n), n == 0
	})
}

// consumers returns the number of consumers on the bucket's stream.
func consumers(tb testing.TB, js jetstream.JetStream, bucket string) int {
	tb.Helper()
	stream, err := js.Stream(context.Background(), "KV_"+bucket)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := stream.Info(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.Consumers
}

func TestOneBucketServesManyElectionsWithOneWatcher(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "FLEET", TTL: ttl})
	f := startFleet(t, kv, 50, 3, election.WithoutSplay())
	f.awaitAllLed(t)
	// A watcher the NATS client recreated deletes its old consumer without
	// waiting, so wait for the count rather than read it once.
	testenv.Poll(t, "the one watcher of the process as the only consumer on the bucket's stream", awaitTimeout, func() (int, bool) {
		n := consumers(t, js, "FLEET")
		return n, n == 1
	})

	f.close()
	for k := range f.elections {
		key := fmt.Sprintf("shard.%d", k)
		e, err := kv.Get(context.Background(), key)
		if err != nil {
			t.Fatalf("key %s after Close: %v", key, err)
		}
		if v := string(e.Value()); len(v) < 9 || v[:9] != "released:" {
			t.Errorf("key %s holds %q after Close, want a release", key, v)
		}
	}
	if _, err := f.bucket.NewElection("late", "k"); !errors.Is(err, election.ErrStopped) {
		t.Errorf("NewElection on a closed bucket: %v, want ErrStopped", err)
	}
}

// Close removes the bucket's watcher from the server before it returns, as
// Stop does for an election made without a Bucket, so a process that closes
// its connection right after leaves no consumer behind. nats.go also
// unsubscribes a watcher when the context it was made with ends; a watcher
// that let that race its own Stop returned while the consumer's deletion was
// still in flight, and the connection's close dropped it.
func TestCloseRemovesTheWatcherBeforeItReturns(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CLOSE", TTL: ttl})
	// Each opens a watcher on the bucket, waits until it is on the server,
	// and returns what removes it.
	watchers := map[string]func(kv jetstream.KeyValue) (remove func()){
		"Bucket.Close": func(kv jetstream.KeyValue) func() {
			b, err := election.OpenBucket(context.Background(), kv)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Leader(context.Background(), "k"); err != nil { // waits for the watcher
				t.Fatal(err)
			}
			return b.Close
		},
		"Election.Stop": func(kv jetstream.KeyValue) func() {
			e, err := election.NewElection(context.Background(), "c", "k", kv, election.WithoutSplay(), election.WithLogger(testenv.Logger(t)))
			if err != nil {
				t.Fatal(err)
			}
			go e.Start(context.Background())
			testenv.Eventually(t, "the election's watcher on the server", awaitTimeout, func() bool {
				return consumers(t, js, "CLOSE") == 1
			})
			return e.Stop
		},
	}
	for name, open := range watchers {
		for round := range 20 {
			nc, own := testenv.Connect(t, s.ClientURL())
			kv, err := own.KeyValue(context.Background(), "CLOSE")
			if err != nil {
				t.Fatal(err)
			}
			open(kv)()
			nc.Close()
			if n := consumers(t, js, "CLOSE"); n != 0 {
				t.Fatalf("%s, round %d: %d consumers on the bucket after it returned and the connection closed, want 0", name, round, n)
			}
		}
	}
}
