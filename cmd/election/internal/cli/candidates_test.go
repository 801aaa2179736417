package cli

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// candidates runs an election for key in bucket for each of names, each on
// a connection and a Bucket of its own (one watcher each, as separate
// processes would have), until the test ends.
func candidates(t *testing.T, url, bucket, key string, names ...string) map[string]*election.Election {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	elections := map[string]*election.Election{}
	for _, name := range names {
		_, js := testenv.Connect(t, url)
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		b, err := election.OpenBucket(ctx, kv, election.WithoutSplay())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close) // stops its election, then its watcher
		e, err := b.NewElection(name, key)
		if err != nil {
			t.Fatal(err)
		}
		elections[name] = e
		wg.Go(func() { e.Start(ctx) })
	}
	return elections
}

// waitLeader waits until exactly one of elections leads, and returns its
// name.
func waitLeader(t *testing.T, elections map[string]*election.Election) string {
	t.Helper()
	leaders := testenv.Poll(t, "exactly one leader", pollTimeout, func() ([]string, bool) {
		var leaders []string
		for name, e := range elections {
			if e.IsLeader() {
				leaders = append(leaders, name)
			}
		}
		return leaders, len(leaders) == 1
	})
	return leaders[0]
}

// waitWatchers waits until the stream of bucket has n consumers.
func waitWatchers(t *testing.T, js jetstream.JetStream, bucket string, n int) {
	t.Helper()
	testenv.Poll(t, fmt.Sprintf("%d watchers on bucket %s", n, bucket), pollTimeout, func() (int, bool) {
		got, err := countWatchers(context.Background(), js, bucket)
		if err != nil {
			t.Fatal(err)
		}
		return got, got == n
	})
}

// pollTimeout bounds the waits of the tests that run candidates.
const pollTimeout = 30 * time.Second

// waitCandidates waits until the bucket lists n live candidates.
func waitCandidates(t *testing.T, js jetstream.JetStream, bucket string, n int) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	b, err := election.OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	testenv.Poll(t, fmt.Sprintf("%d candidates in bucket %s", n, bucket), pollTimeout, func() (int, bool) {
		all, err := b.AllCandidates(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		count := 0
		for _, candidates := range all {
			count += len(candidates)
		}
		return count, count == n
	})
}
