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

// A small machine leads until a bigger one, of higher priority, has been
// up for a second; then it hands the key over.
func ExampleWithPreferHigher() {
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
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "PREFER", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, kv, election.WithoutSplay(), election.WithPreferHigher(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	leading := make(chan string, 2)
	for _, box := range []struct {
		name     string
		priority int
	}{{"small-box", 1}, {"big-box", 2}} {
		e, err := b.NewElection(box.name, "scheduler", election.WithPriority(box.priority),
			election.OnWon(func() { leading <- box.name }))
		if err != nil {
			log.Fatal(err)
		}
		go e.Start(ctx)
		fmt.Println(<-leading, "leads")
	}
	// Output:
	// small-box leads
	// big-box leads
}
