package integration

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

func TestClusterR3ElectsOneLeaderAndSurvivesLosingANode(t *testing.T) {
	t.Parallel()
	nodes := testenv.Cluster(t)
	_, js := testenv.Connect(t, embedded.ClientURLs(nodes))
	// A TTL of 5 s leaves the leader 625 ms to retry a renewal while the
	// cluster absorbs the loss of a node.
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "R3", TTL: 5 * time.Second, Replicas: 3})

	// One candidate per node, each connected there first.
	var kvs []jetstream.KeyValue
	conns := map[string]string{} // candidate name -> server it is connected to
	for i, n := range nodes {
		nc, js := testenv.Connect(t, n.ClientURL()+","+embedded.ClientURLs(nodes))
		kv, err := js.KeyValue(context.Background(), "R3")
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, kv)
		conns[[]string{"c-0", "c-1", "c-2"}[i]] = nc.ConnectedServerName()
	}
	g := startGroup(t, "c", "k", kvs)
	leader := g.awaitWin()

	// Lose a node that is neither the bucket's stream leader nor the one the
	// leader talks to.
	var victim *server.Server
	for _, n := range nodes {
		if !n.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, "KV_R3") && n.Name() != conns[leader.name] {
			victim = n
		}
	}
	if victim == nil {
		t.Fatal("no node is both a stream follower and free of the leader's connection")
	}

	// Watch from a surviving node: a watcher on a dead node stalls for 10–20 s.
	var survivor *server.Server
	for _, n := range nodes {
		if n != victim {
			survivor = n
		}
	}
	_, sjs := testenv.Connect(t, survivor.ClientURL())
	skv, err := sjs.KeyValue(context.Background(), "R3")
	if err != nil {
		t.Fatal(err)
	}
	w, err := skv.Watch(context.Background(), "k", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	embedded.Shutdown(victim)

	// The leader keeps renewing: two more revisions, both its own.
	for range 2 {
		e := nextUpdate(t, w)
		if got := string(e.Value()); got != leader.name {
			t.Fatalf("revision %d of the key holds %q, want the leader %s", e.Revision(), got, leader.name)
		}
	}
	if got := g.leaders(); len(got) != 1 || got[0] != leader.name {
		t.Errorf("after losing a node, leaders are %v, want [%s]", got, leader.name)
	}
	select {
	case ev := <-g.events:
		t.Errorf("leadership changed after losing a follower node: %+v", ev)
	default:
	}
}
