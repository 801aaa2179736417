package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/sidecar"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A Go service mounts the sidecar's endpoints on its own mux, under a
// prefix, and asks /leadership/self whether it leads.
func ExampleServer_Handler() {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "SIDECAR_EXAMPLE", TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, kv)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	s, err := sidecar.New(b, "pod-a", "scheduler", sidecar.Config{Connected: nc.IsConnected}, election.WithoutSplay())
	if err != nil {
		log.Fatal(err)
	}
	followed, err := s.Follow(ctx)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/leadership/", http.StripPrefix("/leadership", s.Handler()))
	srv := httptest.NewServer(mux)
	started := make(chan error, 1)
	go func() { started <- s.Election().Start(ctx) }()

	for {
		res, err := http.Get(srv.URL + "/leadership/self")
		if err != nil {
			log.Fatal(err)
		}
		var v sidecar.Leadership
		json.NewDecoder(res.Body).Decode(&v)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			fmt.Println(res.StatusCode, v.Name, v.IsLeader, v.LeaseMS > 0)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	cancel() // stand down and release the key
	<-started
	s.Close() // end the event streams before the HTTP server stops
	srv.Close()
	<-followed
	// Output:
	// 200 pod-a true true
}
