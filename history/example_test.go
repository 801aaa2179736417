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

// The history as Once's run log: each run of a job is recorded there, and
// LastRuns tells whether it ran, as election check --ran-within does.
func ExampleHistory_LastRuns() {
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
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "EXAMPLE_RUNS", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	h, err := history.Create(ctx, js, "EXAMPLE_RUNS", 0)
	if err != nil {
		log.Fatal(err)
	}
	e, err := election.NewElection(ctx, "host-1", "nightly", kv, election.WithoutSplay())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := e.Once(ctx, 0, func(context.Context) error { return nil }, election.RecordRuns(h), election.DoneFor(time.Hour)); err != nil {
		log.Fatal(err)
	}

	last, success, err := h.LastRuns(ctx, "nightly", time.Now().Add(-25*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("last run by", last.Name, "status", last.Status, "done for", last.DoneFor)
	fmt.Println("it succeeded:", success != nil, "and began before it ended:", !last.Started().After(last.At))
	// Output:
	// last run by host-1 status 0 done for 1h0m0s
	// it succeeded: true and began before it ended: true
}
