package history_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An election records its wins and stand-downs through its event hook;
// Events reads them back.
func ExampleHistory_Record() {
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
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "EXAMPLE_HISTORY", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	h, err := history.Create(ctx, js, "EXAMPLE_HISTORY", 0)
	if err != nil {
		log.Fatal(err)
	}
	won := make(chan struct{})
	e, err := election.NewElection(ctx, "replica-1", "scheduler", kv, election.WithoutSplay(),
		election.WithEventHook(h.Record), election.OnWon(func() { close(won) }))
	if err != nil {
		log.Fatal(err)
	}
	go e.Start(ctx)
	<-won
	e.Stop() // waits for the records to be sent

	events, err := h.Events(ctx, "scheduler", time.Time{})
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range events {
		fmt.Println(ev.Name, ev.Kind+":", ev.After+ev.Cause) // how the key became free, or why it was given up
	}
	// Output:
	// replica-1 won: no key
	// replica-1 stood_down: election: stopped
}
