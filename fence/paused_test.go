package fence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fence"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// awaitTimeout guards against a hang; it is not a speed requirement.
const awaitTimeout = 30 * time.Second

// handover runs two real elections of one key on js's server: A wins, and
// is then paused as far as its work is concerned: it keeps the token it
// read, but stops (Stop releases the key), and B wins over the release. It
// returns A's token and B's, which is higher.
func handover(t *testing.T, js jetstream.JetStream) (tokenA, tokenB uint64) {
	t.Helper()
	ctx := context.Background()
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "ELECTIONS", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	candidate := func(name string) (*election.Election, <-chan uint64) {
		won := make(chan uint64, 1)
		e, err := election.NewElection(ctx, name, "relay", kv, election.WithoutSplay(),
			election.OnWon(func(leading context.Context) {
				token, _ := election.TokenFromContext(leading)
				won <- token
				<-leading.Done()
			}))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := e.Start(ctx); err != nil {
				t.Errorf("%s: Start: %v", name, err)
			}
		}()
		t.Cleanup(func() {
			e.Stop()
			<-done
		})
		return e, won
	}
	await := func(name string, won <-chan uint64) uint64 {
		select {
		case token := <-won:
			return token
		case <-time.After(awaitTimeout):
			t.Fatalf("%s never won", name)
			return 0
		}
	}
	a, wonA := candidate("A")
	tokenA = await("A", wonA)
	_, wonB := candidate("B")
	a.Stop() // A is paused from here on: it never learns, and writes with tokenA
	tokenB = await("B", wonB)
	if tokenB <= tokenA {
		t.Fatalf("B's token %d is not above A's %d", tokenB, tokenA)
	}
	return tokenA, tokenB
}

// checkStale fails the test unless err is a *StaleError for resource with
// these tokens.
func checkStale(t *testing.T, err error, resource string, token, highest uint64) {
	t.Helper()
	var stale *fence.StaleError
	if !errors.Is(err, fence.ErrStale) || !errors.As(err, &stale) {
		t.Fatalf("a write with token %d after one with %d: got %v, want ErrStale", token, highest, err)
	}
	if stale.Resource != resource || stale.Token != token || stale.Highest != highest {
		t.Fatalf("StaleError %+v, want resource %q, token %d, highest %d", *stale, resource, token, highest)
	}
}

// The done-when test: a paused ex-leader's write is refused after the new
// leader wrote, through each fence, with tokens from real elections.
func TestAPausedExLeadersWriteIsRefused(t *testing.T) {
	ctx := context.Background()
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	tokenA, tokenB := handover(t, js)

	t.Run("KV", func(t *testing.T) {
		kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ACCOUNTS"})
		f, err := fence.NewKV(ctx, kv)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Put(ctx, "balance.7", tokenA, []byte("A: 100")); err != nil {
			t.Fatalf("A's write while it led: %v", err)
		}
		if _, err := f.Put(ctx, "balance.7", tokenB, []byte("B: 90")); err != nil {
			t.Fatalf("B's write: %v", err)
		}
		_, err = f.Put(ctx, "balance.7", tokenA, []byte("A: 110"))
		checkStale(t, err, "balance.7", tokenA, tokenB)
		rec, err := f.Get(ctx, "balance.7")
		if err != nil || string(rec.Data) != "B: 90" || rec.Token != tokenB {
			t.Fatalf("the key holds %+v (%v), want B's write", rec, err)
		}
	})

	t.Run("Stream", func(t *testing.T) {
		s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.>"}})
		if err != nil {
			t.Fatal(err)
		}
		f, err := fence.NewStream(js, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Append(ctx, "outbox.orders", tokenA, []byte("A: order 1")); err != nil {
			t.Fatalf("A's append while it led: %v", err)
		}
		if _, err := f.Append(ctx, "outbox.orders", tokenB, []byte("B: order 2")); err != nil {
			t.Fatalf("B's append: %v", err)
		}
		_, err = f.Append(ctx, "outbox.orders", tokenA, []byte("A: order 2"))
		checkStale(t, err, "outbox.orders", tokenA, tokenB)
		rec, err := f.Last(ctx, "outbox.orders")
		if err != nil || string(rec.Data) != "B: order 2" || rec.Token != tokenB {
			t.Fatalf("the subject's last message is %+v (%v), want B's", rec, err)
		}
	})

	t.Run("HTTP", func(t *testing.T) {
		h, err := fence.NewHTTP()
		if err != nil {
			t.Fatal(err)
		}
		var applied []string
		srv := httptest.NewServer(h.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			applied = append(applied, string(body)) // under the fence's lock
		})))
		defer srv.Close()
		post := func(token uint64, body string) (int, string) {
			req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(body))
			req.Header.Set(election.TokenHeader, fmt.Sprint(token))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			msg, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(msg)
		}
		if code, msg := post(tokenA, "A: 1"); code != http.StatusOK {
			t.Fatalf("A's request while it led: %d %s", code, msg)
		}
		if code, msg := post(tokenB, "B: 2"); code != http.StatusOK {
			t.Fatalf("B's request: %d %s", code, msg)
		}
		code, msg := post(tokenA, "A: 3")
		if code != http.StatusConflict {
			t.Fatalf("A's late request: %d %s, want 409", code, msg)
		}
		for _, want := range []string{fence.DefaultResource, fmt.Sprint(tokenA), fmt.Sprint(tokenB)} {
			if !strings.Contains(msg, want) {
				t.Errorf("the 409's body %q does not name %s", msg, want)
			}
		}
		if strings.Join(applied, ",") != "A: 1,B: 2" {
			t.Fatalf("the handler applied %q, want A's first request and B's only", applied)
		}
	})
}
