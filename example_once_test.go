package election_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A nightly job fired on three hosts, recorded in the bucket's history: the
// first host's run fails, so the key is released and the next host runs
// it; that run succeeds and leaves a done mark for a day, which keeps the
// third host from running it, long after the bucket's TTL.
func ExampleDoneFor() {
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
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "NIGHTLY", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	// The history is the run log: it keeps records for a week.
	runs, err := history.Create(ctx, js, "NIGHTLY", 0)
	if err != nil {
		log.Fatal(err)
	}

	failed := false
	for _, host := range []string{"host-1", "host-2", "host-3"} {
		e, err := election.NewElection(ctx, host, "report", kv, election.WithoutSplay())
		if err != nil {
			log.Fatal(err)
		}
		outcome, err := e.Once(ctx, 0, func(leading context.Context) error {
			if !failed {
				failed = true
				return errors.New("the database was down")
			}
			fmt.Println(host, "runs the report")
			return nil
		}, election.RecordRuns(runs), election.DoneFor(24*time.Hour))
		fmt.Println(host+":", outcome, err)
	}
	last, _, err := runs.LastRun(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("last run by", last.Name, "succeeded:", last.Succeeded(), "done for", last.DoneFor)
	// Output:
	// host-1: ran the database was down
	// host-2 runs the report
	// host-2: ran <nil>
	// host-3: done <nil>
	// last run by host-2 succeeded: true done for 24h0m0s
}
