package endpoint_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/endpoint"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// A replica serves svc.report only while it leads the key reports; a
// client sends its requests to svc.report, retrying while no leader serves.
func ExampleEndpoint_Serve() {
	nc, err := nats.Connect(endpoint.NatsURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "ENDPOINT_EXAMPLE", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	ep, err := endpoint.New(nc, endpoint.Config{
		Subject: "svc.report",
		Name:    endpoint.ServiceName("reports"),
		Handler: func(ctx context.Context, req micro.Request) (endpoint.Reply, error) {
			return endpoint.Reply{Data: []byte("report for " + string(req.Data()))}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	e, err := election.NewElection(ctx, "replica-1", "reports", kv,
		election.OnWon(func(leading context.Context) {
			if err := ep.Serve(leading); err != nil { // until leadership ends
				log.Print(err)
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- e.Start(ctx) }()

	// The client: no responders while nobody leads yet, so retry.
	var reply *nats.Msg
	for attempt := 0; ; attempt++ {
		reply, err = nc.Request("svc.report", []byte("alice"), time.Second)
		if err == nil {
			break
		}
		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
			log.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond << min(attempt, 5))
	}
	fmt.Println(string(reply.Data))
	fmt.Println("token:", reply.Header.Get(election.TokenHeader) != "")

	cancel() // stand down: the endpoint stops, then the key is released
	<-started
	// Output:
	// report for alice
	// token: true
}
