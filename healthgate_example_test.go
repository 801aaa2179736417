package election_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A scheduler leads only while its database answers: when the check fails
// three times in a row, the leader releases the key and another replica,
// whose database answers, leads at once.
func ExampleWithHealthCheck() {
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
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "GATEDEXAMPLE", TTL: 4 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, kv, election.WithoutSplay())
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	var dbDown atomic.Bool // replica-1's database connection
	pingDB := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			if name == "replica-1" && dbDown.Load() {
				return errors.New("database: connection refused")
			}
			return nil // in a real app: db.PingContext(ctx)
		}
	}
	leading, stoodDown := make(chan string, 4), make(chan string, 4)
	for _, name := range []string{"replica-1", "replica-2"} {
		e, err := b.NewElection(name, "scheduler",
			election.WithHealthCheck(pingDB(name), 100*time.Millisecond, 3),
			election.OnWon(func() { leading <- name }),
			election.OnLost(func(cause error) {
				if errors.Is(cause, election.ErrHealthCheck) {
					stoodDown <- name
				}
			}))
		if err != nil {
			log.Fatal(err)
		}
		go e.Start(ctx)
		defer e.Stop()
		if name == "replica-1" {
			fmt.Println(<-leading, "leads")
		}
	}
	dbDown.Store(true)
	fmt.Println(<-stoodDown, "stood down: its health check failed")
	fmt.Println(<-leading, "leads")
	// Output:
	// replica-1 leads
	// replica-1 stood down: its health check failed
	// replica-2 leads
}
