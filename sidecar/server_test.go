package sidecar

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestEventsFirstMessageChecksLeadership: a server whose last event said
// it leads, but whose election no longer does (as after a pause past its
// validity deadline, before it has stood down), tells a new /events client
// that it does not lead, as /self would.
func TestEventsFirstMessageChecksLeadership(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SIDE", TTL: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := election.OpenBucket(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sc, err := New(b, "pod-a", "job", Config{Logger: testenv.Logger(t)}) // never started: it does not lead
	if err != nil {
		t.Fatal(err)
	}
	close(sc.watching)
	sc.mu.Lock()
	sc.leading, sc.token, sc.wonAt = true, 7, time.Now()
	sc.last = sc.viewLocked(true, time.Now()) // the last event: leading
	sc.mu.Unlock()

	// A client gone at once: the handler writes the first event, and ends.
	gone, leave := context.WithCancel(context.Background())
	leave()
	rec := httptest.NewRecorder()
	sc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/events", nil).WithContext(gone))
	data, ok := strings.CutPrefix(strings.SplitN(rec.Body.String(), "\n", 2)[0], "data: ")
	var v Leadership
	if err := json.Unmarshal([]byte(data), &v); !ok || err != nil {
		t.Fatalf("/events sent %q: %v", rec.Body.String(), err)
	}
	if v.IsLeader || v.Name == "pod-a" || v.LeaseMS != 0 {
		t.Errorf("first event %+v: want pod-a not leading, with no lease", v)
	}
}

// TestWhileLeadingRunsDuringEachLeadership: Config.WhileLeading runs with
// the leadership context once the server shows this instance leading; once
// that context is done, the server (its event streams too) shows it no
// longer leading while WhileLeading's work still drains, and the election
// releases the key only after WhileLeading has returned.
func TestWhileLeadingRunsDuringEachLeadership(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SIDE", TTL: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := election.OpenBucket(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	type seen struct {
		token                    uint64
		shownAtStart, shownAtEnd bool
	}
	ran := make(chan seen, 1)
	drain := make(chan struct{}) // closed: WhileLeading's work has drained
	var drained sync.Once
	defer drained.Do(func() { close(drain) })
	var sc *Server
	shown := func() bool {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		return sc.leading || sc.last.IsLeader
	}
	sc, err = New(b, "pod-a", "job", Config{Logger: testenv.Logger(t), WhileLeading: func(leading context.Context) {
		token, _ := election.TokenFromContext(leading)
		start := shown()
		<-leading.Done()
		<-drain
		ran <- seen{token, start, shown()}
	}}, election.WithoutSplay())
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- sc.Election().Start(ctx) }()
	testenv.Eventually(t, "pod-a leading", 30*time.Second, sc.Election().IsLeader)
	token := sc.Election().Token()
	cancel()
	testenv.Eventually(t, "the server to stop showing pod-a leading while its work drains", 10*time.Second, func() bool { return !shown() })
	if l, err := b.Leader(context.Background(), "job"); err != nil || l.Name != "pod-a" {
		t.Errorf("while the work drains the key is held by %q (%v), want pod-a's until it has drained", l.Name, err)
	}
	drained.Do(func() { close(drain) })
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	sc.Close()
	if got := <-ran; got != (seen{token, true, false}) {
		t.Errorf("WhileLeading saw %+v; want token %d, the server showing the leadership at its start and not once it ended", got, token)
	}
}
