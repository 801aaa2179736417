package promelection_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/promelection"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func ExampleNewCollector() {
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
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ELECTIONS", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	// Register the collector in the program's own registry and serve it.
	metrics, err := promelection.NewCollector()
	if err != nil {
		log.Fatal(err)
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics)
	handler := promhttp.HandlerFor(registry, promhttp.HandlerOpts{}) // http.Handle("/metrics", handler)

	e, err := election.NewElection(ctx, "replica-1", "scheduler", kv,
		election.WithoutSplay(),
		election.WithEventHook(metrics.Record),
		election.OnWon(func() { cancel() }), // lead, then stop at once
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		log.Fatal(err)
	}

	// Scrape once and show the leadership series.
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	lines := bufio.NewScanner(rec.Body)
	for lines.Scan() {
		for _, name := range []string{"is_leader", "won_total", "lost_total"} {
			if strings.HasPrefix(lines.Text(), "kvelect_election_"+name+"{") {
				fmt.Println(lines.Text())
			}
		}
	}
	// Output:
	// kvelect_election_is_leader{key="scheduler",name="replica-1"} 0
	// kvelect_election_lost_total{cause="clock_rate",key="scheduler",name="replica-1"} 0
	// kvelect_election_lost_total{cause="handed_over",key="scheduler",name="replica-1"} 0
	// kvelect_election_lost_total{cause="health_check",key="scheduler",name="replica-1"} 0
	// kvelect_election_lost_total{cause="other",key="scheduler",name="replica-1"} 0
	// kvelect_election_lost_total{cause="renew_deadline",key="scheduler",name="replica-1"} 0
	// kvelect_election_lost_total{cause="revision_gone",key="scheduler",name="replica-1"} 0
	// kvelect_election_lost_total{cause="stopped",key="scheduler",name="replica-1"} 1
	// kvelect_election_lost_total{cause="suspended",key="scheduler",name="replica-1"} 0
	// kvelect_election_won_total{key="scheduler",name="replica-1"} 1
}
