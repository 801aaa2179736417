package integration

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkRenew measures one leader renewal: a revision-checked Update of
// the election key, on a single server and on a 3-node cluster's R3 bucket.
// limits.go rests its margins on this round trip.
func BenchmarkRenew(b *testing.B) {
	b.Run("R1", func(b *testing.B) {
		s := testenv.Server(b)
		_, js := testenv.Connect(b, s.ClientURL())
		benchRenew(b, testenv.Bucket(b, js, jetstream.KeyValueConfig{Bucket: "B1", TTL: time.Minute}))
	})
	b.Run("R3", func(b *testing.B) {
		nodes := testenv.Cluster(b)
		_, js := testenv.Connect(b, embedded.ClientURLs(nodes))
		benchRenew(b, testenv.Bucket(b, js, jetstream.KeyValueConfig{Bucket: "B3", TTL: time.Minute, Replicas: 3}))
	})
}

func benchRenew(b *testing.B, kv jetstream.KeyValue) {
	ctx := context.Background()
	rev, err := kv.Create(ctx, "k", []byte("leader"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if rev, err = kv.Update(ctx, "k", []byte("leader"), rev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkColdStart measures, for 3 candidates started together on a key
// that never existed, the time from Start to the first leader announced.
func BenchmarkColdStart(b *testing.B) {
	s := testenv.Server(b)
	_, js := testenv.Connect(b, s.ClientURL())
	kv := testenv.Bucket(b, js, jetstream.KeyValueConfig{Bucket: "COLD", TTL: 2 * time.Second})
	var samples []time.Duration
	i := 0
	for b.Loop() {
		won := make(chan struct{}, 3)
		key := fmt.Sprintf("k%d", i)
		i++
		var es []*election.Election
		for c := range 3 {
			e, err := election.NewElection(context.Background(), fmt.Sprint("c", c), key, kv, election.WithoutSplay(),
				election.OnWon(func() { won <- struct{}{} }))
			if err != nil {
				b.Fatal(err)
			}
			es = append(es, e)
		}
		start := time.Now()
		for _, e := range es {
			go e.Start(context.Background())
		}
		<-won
		samples = append(samples, time.Since(start))
		for _, e := range es {
			e.Stop()
		}
	}
	reportPercentiles(b, samples)
}

// BenchmarkHandover measures the time from Stop of the leader among 3
// candidates to the next leader announced.
func BenchmarkHandover(b *testing.B) {
	s := testenv.Server(b)
	_, js := testenv.Connect(b, s.ClientURL())
	kv := testenv.Bucket(b, js, jetstream.KeyValueConfig{Bucket: "HANDOVER", TTL: 2 * time.Second})
	won := make(chan *election.Election, 16)
	next := 0
	var all []*election.Election
	start := func() {
		var e *election.Election
		e, err := election.NewElection(context.Background(), fmt.Sprint("c", next), "k", kv, election.WithoutSplay(),
			election.OnWon(func() { won <- e }))
		if err != nil {
			b.Fatal(err)
		}
		next++
		all = append(all, e)
		go e.Start(context.Background())
	}
	for range 3 {
		start()
	}
	leader := <-won
	var samples []time.Duration
	for b.Loop() {
		t0 := time.Now()
		leader.Stop()
		leader = <-won
		samples = append(samples, time.Since(t0))
		start()
	}
	b.StopTimer()
	for _, e := range all {
		e.Stop()
	}
	reportPercentiles(b, samples)
}

func reportPercentiles(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[int(math.Ceil(q*float64(len(samples))))-1]) / 1e6
	}
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(float64(samples[len(samples)-1])/1e6, "max-ms")
}
