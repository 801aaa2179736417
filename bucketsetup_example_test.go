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

func ExampleCreateBucket() {
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

	// Creates the bucket, or checks the one that exists and leaves it as it is.
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "JOBS", TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err) // the error lists what is wrong with an existing bucket
	}
	status, err := kv.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("bucket", kv.Bucket(), "TTL", status.TTL())

	// A bucket someone made by hand, without a TTL:
	forever, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "FOREVER"})
	if err != nil {
		log.Fatal(err)
	}
	_, err = election.CheckBucket(ctx, forever)
	fmt.Println(err)
	// Output:
	// bucket JOBS TTL 10s
	// election: bucket unusable for elections: bucket "FOREVER": no TTL, so a crashed leader's key never expires; allowed: a TTL from 2s to 1h0m0s
}
