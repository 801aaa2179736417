package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

const ttl = 2 * time.Second

// handles opens n connections to url and binds each to bucket.
func handles(t *testing.T, url, bucket string, n int) []jetstream.KeyValue {
	t.Helper()
	kvs := make([]jetstream.KeyValue, n)
	for i := range kvs {
		_, js := testenv.Connect(t, url)
		kv, err := js.KeyValue(context.Background(), bucket)
		if err != nil {
			t.Fatal(err)
		}
		kvs[i] = kv
	}
	return kvs
}

func TestManyCandidatesOneLeaderAndKeyDeleteFailsOver(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "MANY", TTL: ttl})

	main := startGroup(t, "main", "main", handles(t, s.ClientURL(), "MANY", 10))
	other := startGroup(t, "other", "other", handles(t, s.ClientURL(), "MANY", 3))

	otherLeader := other.awaitWin()
	leader := main.awaitWin()
	if got := main.leaders(); len(got) != 1 || got[0] != leader.name {
		t.Fatalf("after %s won, leaders are %v", leader.name, got)
	}

	for range 3 {
		if err := admin.Delete(context.Background(), "main"); err != nil {
			t.Fatal(err)
		}
		lost := main.awaitLoss(leader.name)
		if !errors.Is(lost.cause, election.ErrRevisionGone) {
			t.Errorf("%s stood down with cause %v, want ErrRevisionGone", leader.name, lost.cause)
		}
		next := main.awaitWin()
		if next.token <= leader.token {
			t.Errorf("token went from %d to %d; tokens must grow", leader.token, next.token)
		}
		if got := main.leaders(); len(got) != 1 || got[0] != next.name {
			t.Fatalf("after %s won, leaders are %v", next.name, got)
		}
		leader = next
	}

	if got := other.leaders(); len(got) != 1 || got[0] != otherLeader.name {
		t.Errorf("the election on another key changed leader: %v, was %s", got, otherLeader.name)
	}
	select {
	case ev := <-other.events:
		t.Errorf("the election on another key was disturbed: %+v", ev)
	default:
	}
}

func TestStopReleasesTheKeyForTheNextLeader(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "STOP", TTL: ttl})
	g := startGroup(t, "c", "k", handles(t, s.ClientURL(), "STOP", 3))

	first := g.awaitWin()
	g.elections[first.name].Stop()
	if g.elections[first.name].IsLeader() {
		t.Error("IsLeader true after Stop")
	}
	lost := g.awaitLoss(first.name)
	if !errors.Is(lost.cause, election.ErrStopped) {
		t.Errorf("stood down with cause %v, want ErrStopped", lost.cause)
	}
	// Released, not left to expire: the key is gone as soon as Stop returns.
	if _, err := admin.Get(context.Background(), "k"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("after Stop, Get of the key: %v, want ErrKeyNotFound", err)
	}
	second := g.awaitWin()
	if second.name == first.name {
		t.Errorf("%s led again after Stop", first.name)
	}
}

func TestCutOffLeaderStandsDownBeforeItsKeyExpires(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CUT", TTL: ttl})

	proxies := map[string]*faultproxy.Proxy{}
	var kvs []jetstream.KeyValue
	for i := range 3 {
		p, err := faultproxy.New(s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies[[]string{"c-0", "c-1", "c-2"}[i]] = p
		kvs = append(kvs, handles(t, p.URL(), "CUT", 1)...)
	}
	g := startGroup(t, "c", "k", kvs)
	leader := g.awaitWin()

	// Watch the key from outside to learn when the leader last wrote it.
	w, err := admin.Watch(context.Background(), "k", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	renewal := <-w.Updates()

	proxies[leader.name].Blackhole()
	lost := g.awaitLoss(leader.name)
	if !errors.Is(lost.cause, election.ErrRenewDeadline) {
		t.Errorf("stood down with cause %v, want ErrRenewDeadline", lost.cause)
	}
	// The leader's last write that reached the server is its latest on the watcher.
	last := renewal
drain:
	for {
		select {
		case e := <-w.Updates():
			if string(e.Value()) == leader.name && e.Revision() > last.Revision() {
				last = e
			}
		default:
			break drain
		}
	}
	if expiry := last.Created().Add(ttl); !lost.at.Before(expiry) {
		t.Errorf("stood down at %v, not before its key could expire at %v", lost.at, expiry)
	}

	next := g.awaitWin()
	if next.name == leader.name {
		t.Fatalf("the cut-off leader %s won again", leader.name)
	}
	if !next.at.After(lost.at) {
		t.Errorf("%s announced at %v, before %s stood down at %v", next.name, next.at, leader.name, lost.at)
	}
	proxies[leader.name].Heal()
}
