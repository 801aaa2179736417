package mirror_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/mirror"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An observer in another region reads who leads from a mirror of the
// election bucket, and says how stale that may be.
func ExampleOpen() {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "JOBS", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	// The mirror, made once, in the observer's region.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "JOBS_EU", TTL: 2 * time.Second,
		Mirror: &jetstream.StreamSource{Name: "JOBS"}}); err != nil {
		log.Fatal(err)
	}
	won := make(chan struct{})
	e, err := election.NewElection(ctx, "replica-1", "scheduler", kv, election.WithoutSplay(), election.OnWon(func() { close(won) }))
	if err != nil {
		log.Fatal(err)
	}
	go e.Start(ctx)
	<-won

	m, err := mirror.Open(ctx, js, "JOBS_EU", "JOBS")
	if err != nil {
		log.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, m.KeyValue())
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	changes, err := b.Observe(ctx, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	for l := range changes {
		if l.Name != "" {
			lag, err := m.Lag(ctx)
			if err != nil {
				log.Fatal(err)
			}
			// Show lag.Messages and lag.Heard beside what the mirror says.
			fmt.Printf("%s leads %s, from mirror %s of %s (heard from it: %t)\n", l.Name, l.Key, m.Name(), m.Bucket(), lag.Heard >= 0)
			break
		}
	}
	e.Stop()
	// Output:
	// replica-1 leads scheduler, from mirror JOBS_EU of JOBS (heard from it: true)
}
