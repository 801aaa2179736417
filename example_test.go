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

func ExampleNewElection() {
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
	// Once per cluster: nats kv add --ttl 10s ELECTIONS
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ELECTIONS", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	e, err := election.NewElection(ctx, "replica-1", "scheduler", kv,
		election.WithoutSplay(),
		election.OnWon(func(leading context.Context) {
			token, _ := election.TokenFromContext(leading)
			fmt.Println("leading; the fencing token is above zero:", token > 0)
			// Do the singleton work here until leading is done; this example
			// stops at once instead.
			cancel()
		}),
		election.OnLost(func(cause error) { fmt.Println("stood down:", cause) }),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// leading; the fencing token is above zero: true
	// stood down: election: stopped
}

func ExampleElection_Once() {
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
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "CRON", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	// The same job fires on two hosts; it runs on one of them.
	for _, host := range []string{"host-1", "host-2"} {
		e, err := election.NewElection(ctx, host, "nightly-report", kv, election.WithoutSplay())
		if err != nil {
			log.Fatal(err)
		}
		outcome, err := e.Once(ctx, 0, func(leading context.Context) error {
			fmt.Println(host, "runs the job")
			return nil
		})
		fmt.Println(host+":", outcome, err)
	}
	// Output:
	// host-1 runs the job
	// host-1: ran <nil>
	// host-2: done <nil>
}

// A supervisor of processes outside this one gives them the work deadline,
// so that they stop in time even if this process is paused or killed.
func ExampleWorkDeadline() {
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
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "WORKDEADLINE", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	e, err := election.NewElection(ctx, "replica-1", "compactor", kv,
		election.WithoutSplay(),
		election.OnWon(func(leading context.Context) {
			deadline, ok := election.WorkDeadline(leading)
			// Tell the child processes; read it again after each renewal.
			fmt.Println("leading; the work must stop within a TTL unless renewed:", ok && time.Until(deadline) < 2*time.Second)
			cancel()
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// leading; the work must stop within a TTL unless renewed: true
}

// A leader cut off from the servers stands down at its validity deadline;
// what its leadership started then has ExpiryMargin to stop before another
// candidate can win the key. With a 10 s TTL and the default campaign
// interval (7.5 s):
func ExampleExpiryMargin() {
	fmt.Println(election.ExpiryMargin(10*time.Second, 0))
	// Output: 1.25s
}
