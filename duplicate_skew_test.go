package election

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// skewTTL is the TTL of the buckets of these tests.
const skewTTL = 2 * time.Second

// foreignRecord is a candidate record of "web" by the run instance names.
func foreignRecord(instance string) []byte {
	return []byte(fmt.Sprintf(`{"name":"web","priority":1,"since":"2026-01-01T00:00:00Z","writer":{"instance":%q,"host":"elsewhere","pid":7}}`, instance))
}

// skewedBucket makes a bucket of skewTTL named name on a server of its own,
// and opens it as a Bucket whose clock runs at rate.
func skewedBucket(t *testing.T, name string, rate float64) (jetstream.KeyValue, *Bucket) {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: name, TTL: skewTTL})
	b, err := OpenBucket(context.Background(), admin, WithoutSplay(), WithClock(newSkewedClock(rate)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return admin, b
}

func webRecordKey() string {
	return "_kvelect.candidate.job." + base64.RawURLEncoding.EncodeToString([]byte("web"))
}

// TestALiveDuplicateStalledJustUnderATTLIsStillRefused plays a live
// duplicate of "web" by hand (compare-and-set rewrites of its record every
// third of a TTL, on the admin connection) that stalls for 96% of a TTL,
// then starts an election of "web" from a Bucket whose clock runs 5% fast:
// by its clock the record the watcher delivered has aged out, though it is
// still on the server. The new run must not write over the record, must not
// campaign, and must be refused with a *DuplicateError once the duplicate
// writes twice more; every rewrite of the duplicate must succeed (the
// record stays its own throughout).
func TestALiveDuplicateStalledJustUnderATTLIsStillRefused(t *testing.T) {
	for _, rate := range []float64{1.05, 1.0, 0.95} {
		t.Run(fmt.Sprintf("rate %.2f", rate), func(t *testing.T) {
			t.Parallel()
			admin, b := skewedBucket(t, "ATTSTALL", rate)

			key := webRecordKey()
			rev, err := admin.Create(context.Background(), key, foreignRecord("dup000000001"))
			if err != nil {
				t.Fatal(err)
			}
			rewrite := func() error {
				r, err := admin.Update(context.Background(), key, foreignRecord("dup000000001"), rev)
				if err == nil {
					rev = r
				}
				return err
			}
			// A few rewrites seen by the Bucket's watcher.
			for range 3 {
				time.Sleep(skewTTL / 3)
				if err := rewrite(); err != nil {
					t.Fatal(err)
				}
			}
			testenv.Eventually(t, "the watcher shows the duplicate", 10*time.Second, func() bool {
				cs, err := b.Candidates(context.Background(), "job")
				return err == nil && len(cs) == 1
			})
			lastWrite := time.Now()
			// The stall: just under a TTL (by the server's clock, which is real).
			time.Sleep(time.Until(lastWrite.Add(skewTTL * 96 / 100)))

			won := make(chan struct{})
			var once sync.Once
			e, err := b.NewElection("web", "job", WithLogger(testenv.Logger(t)), OnWon(func() { once.Do(func() { close(won) }) }))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Stop)
			ended := make(chan error, 1)
			go func() { ended <- e.Start(context.Background()) }()

			// The duplicate resumes at a third of a TTL.
			stop := make(chan struct{})
			dupErr := make(chan error, 1)
			go func() {
				for {
					if err := rewrite(); err != nil {
						dupErr <- err
						return
					}
					select {
					case <-stop:
						dupErr <- nil
						return
					case <-time.After(skewTTL / 3):
					}
				}
			}()
			var got error
			select {
			case got = <-ended:
			case <-won:
				t.Fatal("the new run led while a live duplicate of its name rewrote its record")
			case <-time.After(3 * skewTTL):
				t.Fatal("the new run was not refused within 3 TTLs")
			}
			close(stop)
			if err := <-dupErr; err != nil {
				t.Errorf("the live duplicate's rewrite failed: %v (its record was written over or deleted)", err)
			}
			var dup *DuplicateError
			if !errors.As(got, &dup) || dup.Running.Instance != "dup000000001" {
				t.Errorf("Start returned %v, want a *DuplicateError naming the duplicate", got)
			}
			select {
			case <-won:
				t.Error("the refused run led")
			default:
			}
		})
	}
}

// TestACrashedRecordIsWaitedOutAtSkewedRates leaves a crashed run's
// record (written once, never again) and starts an election of its name
// from a Bucket whose clock runs at 0.95 or 1.05: it must not be refused,
// must write its record only once the old one is gone from the server, and
// lead.
func TestACrashedRecordIsWaitedOutAtSkewedRates(t *testing.T) {
	for _, rate := range []float64{1.05, 0.95} {
		t.Run(fmt.Sprintf("rate %.2f", rate), func(t *testing.T) {
			t.Parallel()
			admin, b := skewedBucket(t, "ATTCRASH", rate)
			key := webRecordKey()
			if _, err := admin.Create(context.Background(), key, foreignRecord("crashed00001")); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, "the watcher shows the crashed record", 10*time.Second, func() bool {
				cs, err := b.Candidates(context.Background(), "job")
				return err == nil && len(cs) == 1
			})
			time.Sleep(skewTTL / 2)
			won := make(chan struct{})
			var once sync.Once
			e, err := b.NewElection("web", "job", WithLogger(testenv.Logger(t)), OnWon(func() { once.Do(func() { close(won) }) }))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Stop)
			ended := make(chan error, 1)
			go func() { ended <- e.Start(context.Background()) }()
			select {
			case <-won:
			case err := <-ended:
				t.Fatalf("Start returned %v before leading", err)
			case <-time.After(4 * skewTTL):
				t.Fatal("not leading within 4 TTLs")
			}
			e2, err := admin.Get(context.Background(), key)
			if err != nil {
				t.Fatalf("the new run's record: %v", err)
			}
			if string(e2.Value()) == string(foreignRecord("crashed00001")) {
				t.Error("the crashed run's record is still there while the new run leads")
			}
		})
	}
}

// TestTwoRunsOfOneNameStartedTogetherInOneBucket starts two elections
// of "web" from one Bucket (one watcher, so each finds the other's record
// with the moment the watcher delivered it) at the same instant, over many
// rounds: exactly one must be refused with a *DuplicateError, and the two
// must never lead at once.
func TestTwoRunsOfOneNameStartedTogetherInOneBucket(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTTWIN", TTL: skewTTL})
	b, err := OpenBucket(context.Background(), admin, WithoutSplay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	for round := range 5 {
		var mu sync.Mutex
		leading := 0
		var es [2]*Election
		ended := make(chan error, 2)
		start := make(chan struct{})
		for i := range es {
			e, err := b.NewElection("web", "job", WithLogger(testenv.Logger(t).With("run", i)),
				OnWon(func(ctx context.Context) {
					mu.Lock()
					leading++
					if leading > 1 {
						t.Errorf("round %d: two runs of web lead at once", round)
					}
					mu.Unlock()
					<-ctx.Done()
					mu.Lock()
					leading--
					mu.Unlock()
				}))
			if err != nil {
				t.Fatal(err)
			}
			es[i] = e
			go func() { <-start; ended <- e.Start(context.Background()) }()
		}
		close(start)
		var dup *DuplicateError
		select {
		case err := <-ended:
			if !errors.As(err, &dup) {
				t.Fatalf("round %d: the first Start to return returned %v, want a *DuplicateError", round, err)
			}
		case <-time.After(4 * skewTTL):
			t.Fatalf("round %d: neither run was refused within 4 TTLs", round)
		}
		select {
		case err := <-ended:
			t.Fatalf("round %d: the second run ended too: %v", round, err)
		case <-time.After(skewTTL):
		}
		if !es[0].IsLeader() && !es[1].IsLeader() {
			t.Errorf("round %d: the run left is not leading", round)
		}
		for _, e := range es {
			e.Stop()
		}
		<-ended
	}
}
