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

// Follow every key under a prefix: here the nodes of a fleet, each leading
// its own key while it is up.
func ExampleBucket_ObservePrefix() {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "FLEET", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, kv, election.WithoutSplay())
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	nodes, err := b.ObservePrefix(ctx, "nodes/")
	if err != nil {
		log.Fatal(err)
	}

	node, err := b.NewElection("node-1", "nodes/node-1")
	if err != nil {
		log.Fatal(err)
	}
	go node.Start(ctx)
	up := <-nodes
	fmt.Println(up.Key, "held by", up.Name)
	node.Stop() // it leaves: its key is released at once
	down := <-nodes
	fmt.Printf("%s held by %q\n", down.Key, down.Name)
	// Output:
	// nodes/node-1 held by node-1
	// nodes/node-1 held by ""
}
