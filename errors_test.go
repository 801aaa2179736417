package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/natscause"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestCASConflictsAreToldApartFromFailures classifies the errors a real
// server returns: lost compare-and-sets on one replica and on three, where
// Create over a delete marker can return a bare code 10164, against
// infrastructure failures.
func TestCASConflictsAreToldApartFromFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.Server(t)
	nc, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "R1", TTL: time.Minute})

	rev, err := kv.Create(ctx, "k", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	_, createErr := kv.Create(ctx, "k", []byte("b"))
	_, updateErr := kv.Update(ctx, "k", []byte("b"), rev+7)
	deleteErr := kv.Delete(ctx, "k", jetstream.LastRevision(rev+7))
	for what, err := range map[string]error{"Create on a live key": createErr, "stale Update": updateErr, "stale Delete": deleteErr} {
		if err == nil || !isCASConflict(err) {
			t.Errorf("%s: %v is not classified as a lost compare-and-set", what, err)
		}
	}

	// A request the server never answers: sent through a blackholed proxy.
	p, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, pjs := testenv.Connect(t, p.URL())
	pkv, err := pjs.KeyValue(ctx, "R1")
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, timeoutErr := pkv.Update(short, "k", []byte("b"), rev)
	p.Heal()
	nc.Close()
	_, closedErr := kv.Update(ctx, "k", []byte("b"), rev)
	for what, err := range map[string]error{"timed-out Update": timeoutErr, "Update on a closed connection": closedErr} {
		if err == nil || isCASConflict(err) {
			t.Errorf("%s: %v is classified as a lost compare-and-set", what, err)
		}
	}
}

func TestCASConflictsOnR3RacesOverDeleteMarkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nodes := testenv.Cluster(t)
	_, js := testenv.Connect(t, embedded.ClientURLs(nodes))
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "R3", TTL: time.Minute, Replicas: 3})
	var racers []jetstream.KeyValue
	for i := range 8 {
		_, js := testenv.Connect(t, nodes[i%len(nodes)].ClientURL())
		kv, err := js.KeyValue(ctx, "R3")
		if err != nil {
			t.Fatal(err)
		}
		racers = append(racers, kv)
	}

	for round := range 10 {
		if err := admin.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		var wins int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, kv := range racers {
			wg.Go(func() {
				_, err := kv.Create(ctx, "k", []byte("x"))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case !isCASConflict(err):
					t.Errorf("round %d: losing Create returned %v, not classified as a lost compare-and-set", round, err)
				}
			})
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("round %d: %d Creates won over a delete marker, want exactly 1", round, wins)
		}
	}
}

// TestLogRecordsNameTheTopologyFault: a failure that means a cut region or
// a meta group without quorum is logged with what it means; another error
// is logged as it is.
func TestLogRecordsNameTheTopologyFault(t *testing.T) {
	t.Parallel()
	noQuorum := fmt.Errorf("watching: %w", &jetstream.APIError{Code: 503, ErrorCode: natscause.ClusterNotAvailable, Description: "JetStream system temporarily unavailable"})
	if got := errAttrs(noQuorum); len(got) != 4 || got[2] != "cause" || got[3] != natscause.NoMetaQuorum {
		t.Errorf("errAttrs(10008) = %v, want the error and the cause %q", got, natscause.NoMetaQuorum)
	}
	other := errors.New("boom")
	if got := errAttrs(other); len(got) != 2 || got[1] != other {
		t.Errorf("errAttrs(boom) = %v, want the error alone", got)
	}
}
