package fence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fence"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A leader writes a resource's value with its fencing token; a paused
// ex-leader's write with its older token is refused once the new leader
// wrote.
func ExampleKV_Put() {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "EXAMPLE_ACCOUNTS"}) // no TTL: values keep their tokens
	if err != nil {
		log.Fatal(err)
	}
	f, err := fence.NewKV(ctx, kv)
	if err != nil {
		log.Fatal(err)
	}

	// In a leader's work: token, _ := election.TokenFromContext(leading).
	oldLeader, newLeader := uint64(41), uint64(57)
	if _, err := f.Put(ctx, "balance.7", newLeader, []byte("90")); err != nil {
		log.Fatal(err)
	}
	_, err = f.Put(ctx, "balance.7", oldLeader, []byte("110"))
	fmt.Println(errors.Is(err, fence.ErrStale))
	fmt.Println(err)

	rec, _ := f.Get(ctx, "balance.7")
	fmt.Printf("%s (token %d)\n", rec.Data, rec.Token)
	e, _ := kv.Get(ctx, "balance.7")
	fmt.Printf("%q\n", e.Value()) // what nats kv get shows
	// Output:
	// true
	// fence: stale fencing token 41 for resource "balance.7": it has accepted token 57 (the writer is no longer the leader)
	// 90 (token 57)
	// "Fencing-Token: 57\n90"
}

// An outbox relay appends each event to its subject with its token; a
// relay that lost leadership cannot append after its successor did.
func ExampleStream_Append() {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EXAMPLE_OUTBOX", Subjects: []string{"example.outbox.>"}})
	if err != nil {
		log.Fatal(err)
	}
	f, err := fence.NewStream(js, s)
	if err != nil {
		log.Fatal(err)
	}

	if _, err := f.Append(ctx, "example.outbox.orders", 57, []byte(`{"order":2}`)); err != nil {
		log.Fatal(err)
	}
	_, err = f.Append(ctx, "example.outbox.orders", 41, []byte(`{"order":1}`))
	var stale *fence.StaleError
	if errors.As(err, &stale) {
		fmt.Printf("refused: token %d, subject has %d\n", stale.Token, stale.Highest)
	}
	last, _ := s.GetLastMsgForSubject(ctx, "example.outbox.orders")
	fmt.Println(last.Header.Get(election.TokenHeader), string(last.Data))
	// Output:
	// refused: token 41, subject has 57
	// 57 {"order":2}
}

// A service receiving the leader's work wraps its handler: each request
// carries the leader's token in its Fencing-Token header, and a stale one
// is refused with 409 Conflict.
func ExampleHTTP_Handler() {
	f, err := fence.NewHTTP(fence.WithResource(func(r *http.Request) string { return r.URL.Path }))
	if err != nil {
		log.Fatal(err)
	}
	apply := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "applied") // runs under the fence's lock for r's resource
	})
	srv := httptest.NewServer(f.Handler(apply))
	defer srv.Close()

	for _, token := range []string{"57", "41", ""} {
		req, _ := http.NewRequest("POST", srv.URL+"/jobs/nightly", nil)
		if token != "" {
			req.Header.Set(election.TokenHeader, token) // in the leader: fmt.Sprint(election.TokenFromContext(leading))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s", resp.StatusCode, body)
	}
	// Output:
	// 200 applied
	// 409 fence: stale fencing token 41 for resource "/jobs/nightly": it has accepted token 57 (the writer is no longer the leader)
	// 400 fence: missing Fencing-Token header: send the leader's fencing token, a decimal integer from 1 to 18446744073709551615 (the leader's election.TokenFromContext)
}
