package election_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func ExampleHealthHandler() {
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
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "HEALTH_EXAMPLE", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	var healthz http.Handler
	e, err := election.NewElection(ctx, "replica-1", "scheduler", kv,
		election.WithoutSplay(),
		election.OnWon(func() {
			// A real program serves healthz with http.Handle("/healthz", healthz).
			rec := httptest.NewRecorder()
			healthz.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			fmt.Print(rec.Code, " ", rec.Body.String())
			cancel()
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	// Fail the probe when a leader is stuck 5 s past its validity deadline.
	healthz = election.HealthHandler(5*time.Second, e)
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 200 ok
}
