package promelection_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/promelection"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// A fleet node's collector: registered before the node joins, told of each
// run of a daemon, and sampling the fleet for the time a daemon runs
// nowhere.
func ExampleFleetCollector() {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "FLEET_METRICS", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, kv)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	var joined atomic.Pointer[fleet.Node]
	var metrics *promelection.FleetCollector
	started := make(chan struct{})
	cfg := fleet.Config{Name: "node-1", Capacity: 1, Daemons: []fleet.Daemon{{Name: "outbox-relay", Run: func(ctx context.Context) error {
		token, _ := election.TokenFromContext(ctx)
		metrics.Ran("outbox-relay", token) // a new token: the daemon moved here
		close(started)
		<-ctx.Done()
		return nil
	}}}}
	metrics = promelection.NewFleetCollector(b, cfg, joined.Load)
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics)
	go metrics.Watch(ctx, time.Second)

	node, err := fleet.Join(ctx, b, cfg)
	if err != nil {
		log.Fatal(err)
	}
	joined.Store(node)
	<-started

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	lines := bufio.NewScanner(rec.Body)
	for lines.Scan() {
		for _, name := range []string{"daemon_starts_total", "node_capacity", "node_is_member"} {
			if strings.HasPrefix(lines.Text(), "kvelect_fleet_"+name+"{") {
				fmt.Println(lines.Text())
			}
		}
	}
	node.Leave()
	// Output:
	// kvelect_fleet_daemon_starts_total{daemon="outbox-relay",node="node-1"} 1
	// kvelect_fleet_node_capacity{node="node-1"} 1
	// kvelect_fleet_node_is_member{node="node-1"} 1
}

// An observer's collector counts the holders a watch of the bucket reports
// (election.Bucket.Observe): here three, by hand.
func ExampleObserverCollector() {
	metrics := promelection.NewObserverCollector()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics)

	// for l := range changes { metrics.Seen(l) }, with changes from b.Observe(ctx, "scheduler")
	metrics.Seen(election.Leader{Key: "scheduler", Name: "replica-1"})
	metrics.Seen(election.Leader{Key: "scheduler"}) // the key is free
	metrics.Seen(election.Leader{Key: "scheduler", Name: "replica-2"})

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	lines := bufio.NewScanner(rec.Body)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "kvelect_election_") {
			fmt.Println(lines.Text())
		}
	}
	// Output:
	// kvelect_election_has_leader{key="scheduler"} 1
	// kvelect_election_leader_changes_seen_total{key="scheduler"} 1
}
