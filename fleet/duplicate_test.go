package fleet_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTwinsJoiningAtOnceShareNothing joins two nodes of one name at the
// same instant, with different daemons and capacities: one joins, the other
// is refused with ErrNameTaken, and no process watching the fleet ever sees
// the refused one's daemons or capacity; its refusal deletes nothing.
func TestTwinsJoiningAtOnceShareNothing(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "TWINS")
	f.join("w", 0, "x", "y")
	_, watchBucket := f.open()
	watchCtx, stopWatching := context.WithCancel(context.Background())
	defer stopWatching()
	events, err := fleet.WatchMembers(watchCtx, watchBucket)
	if err != nil {
		t.Fatal(err)
	}
	var seen []fleet.Member // every join of a that the watcher reported
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range events {
			if ev.Joined && ev.Member.Name == "a" {
				seen = append(seen, ev.Member)
			}
		}
	}()

	configs := []fleet.Config{
		{Name: "a", Capacity: 1, Daemons: []fleet.Daemon{f.ledger.daemon("x", "a", 0)}},
		{Name: "a", Capacity: 7, Daemons: []fleet.Daemon{f.ledger.daemon("y", "a", 0)}},
	}
	var nodes [2]*fleet.Node
	var errs [2]error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range configs {
		configs[i].Logger = testenv.Logger(t).With("twin", i)
		_, b := f.open()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
			defer cancel()
			nodes[i], errs[i] = fleet.Join(ctx, b, configs[i])
		}()
	}
	close(start)
	wg.Wait()
	won := slices.IndexFunc(nodes[:], func(n *fleet.Node) bool { return n != nil })
	if won < 0 || nodes[1-won] != nil {
		t.Fatalf("both twins joined, or neither: errors %v", errs)
	}
	t.Cleanup(nodes[won].Leave)
	if lost := errs[1-won]; !errors.Is(lost, fleet.ErrNameTaken) || !errors.Is(lost, election.ErrDuplicateName) {
		t.Fatalf("the second twin: %v, want ErrNameTaken and election.ErrDuplicateName", lost)
	}
	winner := configs[won]

	// What every process reads of a is the winner's record, after the
	// loser's refusal: w's view and a fresh read of the bucket.
	st, err := fleet.ReadStatus(context.Background(), watchBucket)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Members, func(m fleet.Member) bool { return m.Name == "a" })
	if i < 0 || st.Members[i].Capacity != winner.Capacity || !slices.Equal(st.Members[i].Daemons, []string{winner.Daemons[0].Name}) {
		t.Fatalf("the fleet's status of a: %+v, want the winner's capacity %d and daemon %s", st.Members, winner.Capacity, winner.Daemons[0].Name)
	}
	testenv.Eventually(t, "w to see a", awaitTimeout, func() bool {
		return slices.ContainsFunc(f.nodes["w"].Members(), func(m fleet.Member) bool { return m.Name == "a" })
	})
	for _, m := range f.nodes["w"].Members() {
		if m.Name == "a" && (m.Capacity != winner.Capacity || !slices.Equal(m.Daemons, []string{winner.Daemons[0].Name})) {
			t.Errorf("w sees a as %+v, want the winner's record", m)
		}
	}
	stopWatching()
	<-watched
	for _, m := range seen {
		if m.Capacity != winner.Capacity || !slices.Equal(m.Daemons, []string{winner.Daemons[0].Name}) {
			t.Errorf("a watcher saw a join as %+v, want only the winner's record", m)
		}
	}
}

// TestANodeRestartedAfterACrashRejoins abandons a node without Leave (its
// connection closed, as after SIGKILL) and joins a node of its name again:
// it joins, not refused, within a TTL and a third (its old record's age
// plus the server's lag) and slack, and runs the daemon.
func TestANodeRestartedAfterACrashRejoins(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "REJOIN")
	f.join("a", 0, "x")
	f.awaitPlacement("x on a", func(where map[string]string, _ map[string]int) bool { return where["x"] == "a" })
	f.conns["a"].Close()
	began := time.Now()
	f.joinWith(fleet.Config{Name: "a", Daemons: []fleet.Daemon{f.ledger.daemon("x", "a", 0)}, Logger: testenv.Logger(t).With("node", "a, restarted")})
	if took, bound := time.Since(began), ttl+ttl/3+ttl/2; took > bound {
		t.Errorf("the restarted a joined %v after it started, want within %v", took, bound)
	}
	f.awaitPlacement("x on the restarted a", func(where map[string]string, _ map[string]int) bool { return where["x"] == "a" })
}

// TestANodeWhoseNameWasTakenWhileCutOffLeaves cuts a node off for long
// enough that its record ages out, joins another node of its name, then
// heals the cut: the first leaves by itself (Done, Err matching
// ErrNameTaken), and the second stays a member, its record intact.
func TestANodeWhoseNameWasTakenWhileCutOffLeaves(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	f := fleetOn(t, s.ClientURL(), jetstream.KeyValueConfig{Bucket: "TAKEN", TTL: ttl})
	p, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	nc, err := nats.Connect(p.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), "TAKEN")
	if err != nil {
		t.Fatal(err)
	}
	b, err := election.OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cut, err := fleet.Join(context.Background(), b, fleet.Config{Name: "a", Logger: testenv.Logger(t).With("node", "a, cut")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cut.Leave)

	p.Refuse()
	other := f.joinWith(fleet.Config{Name: "a", Capacity: 3, Logger: testenv.Logger(t).With("node", "a, other")})
	p.Heal()
	select {
	case <-cut.Done():
	case <-time.After(awaitTimeout):
		t.Fatalf("the cut a still runs %v after the heal", awaitTimeout)
	}
	if err := cut.Err(); !errors.Is(err, fleet.ErrNameTaken) || !errors.Is(err, election.ErrDuplicateName) {
		t.Errorf("the cut a left with %v, want ErrNameTaken and election.ErrDuplicateName", err)
	}
	if cut.IsMember() || !other.IsMember() {
		t.Errorf("after the heal: the cut a a member %v, the other %v; want only the other", cut.IsMember(), other.IsMember())
	}
	_, fresh := f.open() // a watcher of its own, not the cut one's, which may lag
	st, err := fleet.ReadStatus(context.Background(), fresh)
	if err != nil || len(st.Members) != 1 || st.Members[0].Capacity != 3 {
		t.Errorf("after the cut a left: members %+v (%v), want the other a, of capacity 3", st.Members, err)
	}
	if other.Err() != nil {
		t.Errorf("the other a: Err %v, want nil", other.Err())
	}
}
