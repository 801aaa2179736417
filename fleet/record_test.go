package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAMemberWhoseRecordArrivesAfterItsKeyCounts holds a node key with no
// record (an election WithoutPresence), as a node that was paused or cut
// off for over a TTL does when its renewal arrives before its rewritten
// record; once the record arrives, the member is seen by WatchMembers and
// by every node.
func TestAMemberWhoseRecordArrivesAfterItsKeyCounts(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LATERECORD", TTL: 2 * time.Second})
	b, err := election.OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := WatchMembers(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	next := func() MemberEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(time.Minute):
			t.Fatal("no member event")
			return MemberEvent{}
		}
	}

	ghost := Config{Name: "ghost", Capacity: 2}
	holdsKey := campaign(t, b, ghost.Name, election.WithoutPresence())
	<-holdsKey
	a, err := Join(ctx, b, Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Leave()
	if ev := next(); !ev.Joined || ev.Member.Name != "a" {
		t.Fatalf("%+v, want a joined (ghost has no record yet)", ev)
	}

	campaign(t, b, ghost.Name, election.WithMetadata(ghost.metadata(nil))) // writes the record, waits for the key
	if ev := next(); !ev.Joined || ev.Member.Name != "ghost" || ev.Member.Capacity != 2 {
		t.Errorf("%+v, want ghost joined with capacity 2", ev)
	}
	testenv.Eventually(t, "a sees ghost", time.Minute, func() bool { return len(a.Members()) == 2 })
}

// campaign runs an election for name's node key until the test ends, and
// returns a channel closed when it leads.
func campaign(t *testing.T, b *election.Bucket, name string, opts ...election.Option) <-chan struct{} {
	t.Helper()
	won := make(chan struct{})
	opts = append(opts, election.OnWon(func() { close(won) }))
	e, err := b.NewElection(name, nodeKey(name), opts...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Start(context.Background())
	}()
	t.Cleanup(func() {
		e.Stop()
		<-done
	})
	return won
}
