package fleet_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// exampleBucket connects to the examples' server and creates and opens the
// election bucket name there, as ExampleJoin does step by step, for the
// examples whose point is elsewhere. closeBucket closes the bucket, then the
// connection.
func exampleBucket(ctx context.Context, name string) (b *election.Bucket, closeBucket func()) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: name, TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	b, err = election.OpenBucket(ctx, kv)
	if err != nil {
		log.Fatal(err)
	}
	return b, func() {
		b.Close()
		nc.Close()
	}
}

// Each replica of a service joins the fleet under its own name with the
// daemons it can run; the fleet runs each daemon on exactly one live
// replica, spread over them, and moves it when its replica leaves or dies.
func ExampleJoin() {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "FLEET_EXAMPLE", TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, kv)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	started := make(chan string, 2)
	daemon := func(name string) fleet.Daemon {
		return fleet.Daemon{Name: name, Run: func(ctx context.Context) error {
			token, _ := election.TokenFromContext(ctx) // pass it to what the daemon changes
			_ = token
			started <- name
			<-ctx.Done() // work until the fleet stops this daemon here
			return nil
		}}
	}
	node, err := fleet.Join(ctx, b, fleet.Config{
		Name:    "replica-1",
		Daemons: []fleet.Daemon{daemon("outbox-relay"), daemon("compactor")},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Leave() // hands the daemons to other replicas at once

	fmt.Println(<-started != "", <-started != "")
	// Output: true true
}

// WatchMembers reports the fleet's nodes as they join and leave, to any
// process.
func ExampleWatchMembers() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, closeBucket := exampleBucket(ctx, "FLEET_MEMBERS") // as in ExampleJoin
	defer closeBucket()
	events, err := fleet.WatchMembers(ctx, b)
	if err != nil {
		log.Fatal(err)
	}
	node, err := fleet.Join(ctx, b, fleet.Config{Name: "replica-1", Capacity: 2})
	if err != nil {
		log.Fatal(err)
	}
	ev := <-events
	fmt.Println(ev.Joined, ev.Member.Name, ev.Member.Capacity)
	node.Leave()
	ev = <-events
	fmt.Println(ev.Joined, ev.Member.Name)
	// Output:
	// true replica-1 2
	// false replica-1
}

// A primary site's nodes join with a higher priority than the standby
// site's: the daemons run on the primary while one of its nodes that can
// run them is live, and on the standby otherwise. With PreferHigher, a
// standby node hands its daemons back when a primary node joins; without
// it, they stay on the standby until its node leaves.
func ExampleConfig_priority() {
	ctx := context.Background()
	b, closeBucket := exampleBucket(ctx, "FLEET_PRIORITY") // as in ExampleJoin
	defer closeBucket()

	runs := make(chan string, 3)
	relay := func(node string) []fleet.Daemon {
		return []fleet.Daemon{{Name: "outbox-relay", Run: func(ctx context.Context) error {
			runs <- node
			<-ctx.Done()
			return nil
		}}}
	}
	standby, err := fleet.Join(ctx, b, fleet.Config{Name: "standby-1", PreferHigher: true, Daemons: relay("standby-1")})
	if err != nil {
		log.Fatal(err)
	}
	defer standby.Leave()
	fmt.Println("runs on", <-runs) // the only node

	primary, err := fleet.Join(ctx, b, fleet.Config{Name: "primary-1", Priority: 1, Daemons: relay("primary-1")})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("runs on", <-runs) // handed over once it returned on standby-1

	primary.Leave()
	fmt.Println("runs on", <-runs) // back on the standby
	// Output:
	// runs on standby-1
	// runs on primary-1
	// runs on standby-1
}
