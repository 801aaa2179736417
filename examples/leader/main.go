// Command leader is the README's example: one replica of a service that does
// singleton work only while it leads. Run several; stop the leader (Ctrl-C)
// and another takes over at once.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	url := os.Getenv("NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}

	// The bucket's TTL bounds how long a crashed leader blocks the work.
	// CreateBucket opens the bucket if it exists.
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "ELECTIONS", TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	host, _ := os.Hostname()
	name := fmt.Sprintf("%s-%d", host, os.Getpid())
	e, err := election.NewElection(ctx, name, "scheduler", kv,
		election.OnWon(func(leading context.Context) {
			token, _ := election.TokenFromContext(leading)
			log.Printf("%s leads, fencing token %d", name, token)
			work(leading, token)
		}),
		election.OnLost(func(cause error) { log.Printf("%s stood down: %v", name, cause) }),
	)
	if err != nil {
		log.Fatal(err)
	}
	// Start campaigns until SIGINT or SIGTERM. A leader then stands down and
	// releases the key, and another replica leads within milliseconds.
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
}

// work does the singleton work until leading is cancelled: when this replica
// stands down, whatever the reason. Pass the token to what it changes, so
// that a stale leader's writes can be refused.
func work(leading context.Context, token uint64) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-leading.Done():
			return
		case <-tick.C:
			log.Printf("working with token %d", token)
		}
	}
}
