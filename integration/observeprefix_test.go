package integration

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// next returns the next change ObservePrefix delivers.
func next(t *testing.T, changes <-chan election.Leader) election.Leader {
	t.Helper()
	select {
	case l, ok := <-changes:
		if !ok {
			t.Fatal("the changes ended")
		}
		return l
	case <-time.After(awaitTimeout):
		t.Fatalf("no change within %v", awaitTimeout)
		return election.Leader{}
	}
}

// TestObservePrefixFollowsEveryKeyUnderIt follows the keys under svc/: their
// holders as they win, a stop, a crash; never a key outside the prefix.
func TestObservePrefixFollowsEveryKeyUnderIt(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "PREFIX")
	b := openBucket(t, admin)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes, err := b.ObservePrefix(ctx, "svc/")
	if err != nil {
		t.Fatal(err)
	}
	a := startGroup(t, "a", "svc/a", handles(t, s.ClientURL(), "PREFIX", 1))
	startGroup(t, "other", "other", handles(t, s.ClientURL(), "PREFIX", 1))
	nc, js := testenv.Connect(t, s.ClientURL())
	kv, err := js.KeyValue(ctx, "PREFIX")
	if err != nil {
		t.Fatal(err)
	}
	startGroup(t, "b", "svc/b", []jetstream.KeyValue{kv})

	held := map[string]string{}
	for len(held) < 2 {
		l := next(t, changes)
		if l.Key != "svc/a" && l.Key != "svc/b" {
			t.Fatalf("a change of %q, outside the prefix", l.Key)
		}
		held[l.Key] = l.Name
	}
	if held["svc/a"] != "a-0" || held["svc/b"] != "b-0" {
		t.Errorf("holders %v, want svc/a by a-0 and svc/b by b-0", held)
	}

	// A later observer starts with the current holders.
	later, err := b.ObservePrefix(ctx, "svc/")
	if err != nil {
		t.Fatal(err)
	}
	first, second := next(t, later), next(t, later)
	if first.Key != "svc/a" || second.Key != "svc/b" || first.Name != "a-0" || second.Name != "b-0" {
		t.Errorf("a later observer began with %+v, %+v; want the two holders in key order", first, second)
	}

	a.elections["a-0"].Stop()
	if l := next(t, changes); l.Key != "svc/a" || l.Name != "" {
		t.Errorf("after a-0 stopped: %+v, want svc/a held by nobody", l)
	}
	nc.Close() // b-0 crashes: its key ages out, without an expiry marker
	crashed := time.Now()
	if l := next(t, changes); l.Key != "svc/b" || l.Name != "" {
		t.Errorf("after b-0 crashed: %+v, want svc/b held by nobody", l)
	}
	// b-0 renewed at most a campaign interval (75% of the TTL) before it
	// crashed, and its key lives a TTL after that.
	if early := time.Until(crashed.Add(ttl / 4)); early > 0 {
		t.Errorf("svc/b showed as aged out %v before its TTL could have passed", early)
	}
}
