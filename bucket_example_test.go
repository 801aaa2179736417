package election_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Two roles on one node share one connection and one watcher; an observer
// follows who leads the scheduler, and a transfer hands it to another node.
func ExampleOpenBucket() {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ROLES", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, kv, election.WithoutSplay())
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close() // stops every election made from b

	changes, err := b.Observe(ctx, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("scheduler held:", (<-changes).Name != "")

	won := make(chan string, 3)
	for _, role := range []struct{ node, key string }{{"node-1", "scheduler"}, {"node-1", "compactor"}} {
		e, err := b.NewElection(role.node, role.key, election.OnWon(func() { won <- role.key }))
		if err != nil {
			log.Fatal(err)
		}
		go e.Start(ctx)
		fmt.Println("node-1 leads", <-won)
	}
	fmt.Println("scheduler held by:", (<-changes).Name)

	// Another node's candidate for the scheduler (here on the same Bucket).
	standby, err := b.NewElection("node-2", "scheduler", election.OnWon(func() { won <- "scheduler on node-2" }))
	if err != nil {
		log.Fatal(err)
	}
	go standby.Start(ctx)
	for { // a transfer names a live candidate: wait until node-2's shows
		candidates, err := b.Candidates(ctx, "scheduler")
		if err != nil {
			log.Fatal(err)
		}
		if len(candidates) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	leader, err := b.Transfer(ctx, "scheduler", "node-2")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("transferred to:", leader.Name, "-", <-won)
	fmt.Println("scheduler held by:", (<-changes).Name == "", "then", (<-changes).Name)
	// Output:
	// scheduler held: false
	// node-1 leads scheduler
	// node-1 leads compactor
	// scheduler held by: node-1
	// transferred to: node-2 - scheduler on node-2
	// scheduler held by: true then node-2
}
