package election

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAHandOverAfterALostRenewalAnswerGoesOverIt stops, resigns or
// transfers the leader of a Bucket's election whose renewal applied with
// its answer lost, while the Bucket's watcher holds the renewal back 50 ms:
// the release or handoff goes over that renewal once the watcher shows it
// (adoptLostRenewal, for Stop; the hold's adopt when the request comes
// with it), and the other candidate leads at once, not a TTL later.
func TestAHandOverAfterALostRenewalAnswerGoesOverIt(t *testing.T) {
	for _, how := range []string{"stop", "resign", "transfer"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s := testenv.Server(t)
			_, js := testenv.Connect(t, s.ClientURL())
			const ttl = 3 * time.Second
			kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LOSTHAND", TTL: ttl})
			stall := newStallKV(kv, "svc")
			ba, err := OpenBucket(context.Background(), stall)
			if err != nil {
				t.Fatal(err)
			}
			defer ba.Close()
			bb, err := OpenBucket(context.Background(), kv)
			if err != nil {
				t.Fatal(err)
			}
			defer bb.Close()
			aWon := make(chan struct{}, 4)
			a, err := ba.NewElection("a", "svc", WithoutSplay(), WithLogger(testenv.Logger(t).With("who", "a")), OnWon(func() { aWon <- struct{}{} }))
			if err != nil {
				t.Fatal(err)
			}
			aDone := make(chan error, 1)
			go func() { aDone <- a.Start(context.Background()) }()
			defer func() { a.Stop(); <-aDone }()
			<-aWon
			bWon := make(chan time.Time, 4)
			b, err := bb.NewElection("b", "svc", WithoutSplay(), WithLogger(testenv.Logger(t).With("who", "b")), OnWon(func() { bWon <- time.Now() }))
			if err != nil {
				t.Fatal(err)
			}
			bDone := make(chan error, 1)
			go func() { bDone <- b.Start(context.Background()) }()
			defer func() { b.Stop(); <-bDone }()
			testenv.Eventually(t, "two candidates", 5*time.Second, func() bool {
				c, err := bb.Candidates(context.Background(), "svc")
				return err == nil && len(c) == 2
			})
			var at time.Time
			stall.armed <- func() {
				at = time.Now()
				switch how {
				case "stop":
					go a.Stop()
				case "resign":
					go bb.Resign(context.Background(), "svc") //nolint:errcheck
				case "transfer":
					go bb.Transfer(context.Background(), "svc", "b") //nolint:errcheck
				}
				time.AfterFunc(50*time.Millisecond, stall.unstall)
			}
			select {
			case won := <-bWon:
				if won.Sub(at) > ttl/4 {
					t.Errorf("b led %v after a's renewal answer was lost and a was asked to %s, want at once", won.Sub(at).Round(time.Millisecond), how)
				}
			case <-time.After(2 * ttl):
				t.Fatal("b never led")
			}
		})
	}
}
