package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestLeafLinkCut runs two elections from a leaf node with a JetStream
// domain of its own: one in a bucket of the leaf's domain (an edge
// singleton), one in a bucket of the hub's domain used through it (a
// global singleton), with a candidate on the hub too. The leaf link is cut
// while the leaf's candidate leads the hub's key: silently with the
// server's default ping interval (2 minutes: the leaf notices nothing for
// that long), silently with a short one, and loudly. The leaf's candidate
// must stand down within its validity and the hub's must lead after it;
// the edge election goes on as if nothing happened.
func TestLeafLinkCut(t *testing.T) {
	t.Parallel()
	s := scale()
	for _, c := range []struct {
		name string
		ping time.Duration // the leaf server's; 0 for the default, 2 minutes
		mode cutMode
	}{
		{"blackhole, default ping", 0, linkHeld},
		{fmt.Sprintf("blackhole, ping %v", s.fastPing), s.fastPing, linkHeld},
		{"loud", 0, linkRefused},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			leafLinkCut(t, c.ping, c.mode)
		})
	}
}

func leafLinkCut(t *testing.T, ping time.Duration, mode cutMode) {
	s := scale()
	lp := startLeafPair(t, ping)
	hubURL, leafURL := lp.hub.ClientURL(), lp.leaf.ClientURL()
	_, hubJS := testenv.Connect(t, hubURL)
	hubKV := testenv.Bucket(t, hubJS, jetstream.KeyValueConfig{Bucket: "GLOBAL", TTL: s.ttl})
	_, leafJS := testenv.Connect(t, leafURL)
	testenv.Bucket(t, leafJS, jetstream.KeyValueConfig{Bucket: "EDGE", TTL: s.ttl})
	// The hub's bucket from the leaf: through the hub's domain.
	fromLeaf := func() jetstream.KeyValue {
		nc, _ := testenv.Connect(t, leafURL)
		js, err := jetstream.NewWithDomain(nc, "hub")
		if err != nil {
			t.Fatal(err)
		}
		return bind(t, js, "GLOBAL")
	}
	edge := func() jetstream.KeyValue {
		_, js := testenv.Connect(t, leafURL)
		return bind(t, js, "EDGE")
	}

	rec := newRenewRecord()
	global := newGroup(t, "global")
	global.add("leaf", fromLeaf(), rec.hook())
	if ev := global.awaitWin(); ev.name != "leaf" {
		t.Fatalf("%s won the global key, want leaf, its only candidate", ev.name)
	}
	global.add("hub", bind(t, hubJS, "GLOBAL"), rec.hook())
	local := newGroup(t, "local")
	local.add("edge-0", edge(), rec.hook())
	local.add("edge-1", edge(), rec.hook())
	edgeLeader := local.awaitWin().name

	history := watchKey(t, hubKV, "global") // on the hub: every write that reached the bucket
	w := watchKey(t, fromLeaf(), "probe")
	probe := startProbe(fromLeaf(), "probe-leaf", 250*time.Millisecond, 2*time.Second)
	defer probe.stop()
	newWatch := fromLeaf()

	rec.await(t, "leaf", time.Now())
	cut := time.Now()
	lp.IsolateRegion("leaf", mode.fault())
	watchErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		w, err := newWatch.Watch(ctx, "global", jetstream.UpdatesOnly())
		if err == nil {
			w.Stop()
		}
		watchErr <- err
	}()
	lost := global.awaitLoss("leaf")
	next := global.awaitWin()
	if next.name != "hub" {
		t.Errorf("%s led the hub's key with the leaf cut off", next.name)
	}
	checkStoodDownInTime(t, s.ttl, rec, history, "leaf", cut, lost)
	// The edge election goes on: its leader renews twice during the cut.
	r := rec.await(t, edgeLeader, cut)
	rec.await(t, edgeLeader, r.acked)
	switch {
	case mode == linkRefused:
		if _, ok := probe.first("no responders", cut); !ok {
			testenv.Poll(t, "a write from the leaf to fail fast with no responders", awaitTimeout, func() (probeResult, bool) {
				return probe.first("no responders", cut)
			})
		}
	case ping != 0:
		// The leaf notices the dead link after missing pings, and writes
		// then fail fast instead of timing out.
		noticed := testenv.Poll(t, "the leaf to notice the dead link", awaitTimeout, func() (probeResult, bool) {
			return probe.first("no responders", cut)
		})
		figure(t, "the leaf noticed the cut after about %v", noticed.at.Sub(cut).Round(100*time.Millisecond))
	}
	holdCut(cut, s.minCut)
	if err := <-watchErr; err == nil {
		t.Errorf("a new watcher of the hub's bucket started from the leaf during the cut")
	} else {
		figure(t, "a new watcher of the hub's bucket from the leaf during the cut: %s (%v)", errClass(err), err)
	}
	heal := time.Now()
	lp.Heal()
	if _, ok := probe.first("no responders", cut); ping == 0 && mode == linkHeld && ok {
		t.Errorf("at the default ping interval the leaf noticed a %v cut: %s", heal.Sub(cut).Round(time.Second), runs(probe.stop(), cut, heal))
	}
	for _, ev := range local.drain() {
		t.Errorf("the leaf's own election changed leader during the cut: %+v", ev)
	}
	resume := watchResume(t, hubKV, w, "probe")
	figure(t, "the leaf's leader of the hub's key stood down %v after the cut; the hub's candidate led %v later (leaderless)",
		lost.at.Sub(cut).Round(time.Millisecond), next.at.Sub(lost.at).Round(time.Millisecond))
	figure(t, "writes from the leaf to the hub's bucket during the cut: %s", runs(probe.stop(), cut, heal))
	figure(t, "the leaf's watcher of the hub's bucket delivered a write made after the heal %v after it", resume.Round(time.Millisecond))
	figure(t, "the leaf's own election: no change of leader, %s renewing throughout", edgeLeader)
}
