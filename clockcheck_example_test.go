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

// suspendingClock is the machine's clock for a test that says when the
// machine slept: a Clock that is also a SuspendReporter.
type suspendingClock struct{ slept atomic.Int64 }

func (*suspendingClock) Now() time.Time                     { return time.Now() }
func (*suspendingClock) Real(d time.Duration) time.Duration { return d }
func (c *suspendingClock) Suspended() time.Duration         { return time.Duration(c.slept.Load()) }

// On Linux the machine's clock reports a suspend by itself; a test
// reports one through a clock of its own. Here the leader's machine
// sleeps a minute while it leads: its monotonic clock stood still, so its
// validity deadline proves nothing, and it stands down at once.
func ExampleSuspendReporter() {
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
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "SUSPENDED", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	clock := &suspendingClock{}
	var e *election.Election
	e, err = election.NewElection(ctx, "replica-1", "scheduler", kv,
		election.WithoutSplay(),
		election.WithClock(clock),
		election.OnWon(func(leading context.Context) {
			if leading.Err() != nil {
				return // leading again after the suspend, but the example is over
			}
			fmt.Println("leading:", e.IsLeader())
			clock.slept.Add(int64(time.Minute)) // the machine slept a minute, and resumed
			fmt.Println("right after the suspend, leading:", e.IsLeader())
			<-leading.Done()
		}),
		election.OnLost(func(cause error) {
			if errors.Is(cause, election.ErrSuspended) {
				fmt.Println("stood down:", cause)
				cancel()
			}
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// leading: true
	// right after the suspend, leading: false
	// stood down: election: the machine was suspended for 1m0s since the leader sent its latest acknowledged write
}
