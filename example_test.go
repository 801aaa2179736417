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

// Every deadline of an election comes from its bucket TTL, its campaign
// interval and the clock assumption. With a 10 s TTL and the default
// interval:
func ExampleTimingFor() {
	t := election.TimingFor(10*time.Second, 0)
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	fmt.Println("renews every", t.Interval)
	fmt.Println("stands down after", ms(t.Validity))
	fmt.Println("work stopped by", ms(t.WorkDeadline), "a margin of", ms(t.WorkMargin()))
	fmt.Println("earliest expiry", ms(t.EarliestExpiry))
	fmt.Println("announce delay", ms(t.AnnounceDelay))
	// Output:
	// renews every 7.5s
	// stands down after 8.464s
	// work stopped by 9.187s a margin of 723ms
	// earliest expiry 9.429s
	// announce delay 10.421s
}
