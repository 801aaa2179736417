package sidecar

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestASuspendEndsTheLease: while the sidecar leads, its machine reports
// that it slept 5 s. Right after, /self answers 503 with no lease, and
// /events says that this instance no longer leads, with no lease, within
// a few of the election's 100 ms lease-watch polls.
func TestASuspendEndsTheLease(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SIDE", TTL: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := &testenv.SuspendClock{}
	b, err := election.OpenBucket(ctx, kv, election.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sc, err := New(b, "pod-a", "job", Config{Logger: testenv.Logger(t)}, election.WithoutSplay())
	if err != nil {
		t.Fatal(err)
	}
	followed, err := sc.Follow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- sc.Election().Start(ctx) }()
	srv := httptest.NewServer(sc.Handler())
	defer func() {
		cancel()
		<-started
		sc.Close()
		srv.Close()
		<-followed
	}()

	testenv.Eventually(t, "/self answering 200", 30*time.Second, func() bool {
		res, err := srv.Client().Get(srv.URL + "/self")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	events := make(chan Leadership, 64)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	go func() {
		defer close(events)
		lines := bufio.NewScanner(res.Body)
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				var v Leadership
				if json.Unmarshal([]byte(data), &v) == nil {
					events <- v
				}
			}
		}
	}()
	next := func(what string, match func(Leadership) bool) Leadership {
		t.Helper()
		for {
			select {
			case v, ok := <-events:
				if !ok {
					t.Fatalf("/events ended before %s", what)
				}
				if match(v) {
					return v
				}
			case <-ctx.Done():
				t.Fatalf("no event %s", what)
			}
		}
	}
	v := next("saying pod-a leads", func(v Leadership) bool { return v.IsLeader })
	if v.LeaseMS < 5000 {
		t.Fatalf("leading with a lease of %d ms, want several seconds at a TTL of 10 s", v.LeaseMS)
	}

	clk.Sleep(5 * time.Second)
	slept := time.Now()
	selfRes, err := srv.Client().Get(srv.URL + "/self")
	if err != nil {
		t.Fatal(err)
	}
	var self Leadership
	err = json.NewDecoder(selfRes.Body).Decode(&self)
	selfRes.Body.Close()
	if err != nil || selfRes.StatusCode != http.StatusServiceUnavailable || self.IsLeader || self.LeaseMS != 0 {
		t.Errorf("/self right after the sleep: %d %+v (%v), want 503, not leading, no lease", selfRes.StatusCode, self, err)
	}
	down := next("saying pod-a no longer leads", func(v Leadership) bool { return !v.IsLeader })
	took := time.Since(slept)
	t.Logf("/events said pod-a no longer leads %v after the sleep, lease %d ms (before it: %d ms)", took.Round(time.Millisecond), down.LeaseMS, v.LeaseMS)
	if limit := 300 * time.Millisecond; took > limit {
		t.Errorf("/events said pod-a no longer leads %v after the sleep, want within %v", took.Round(time.Millisecond), limit)
	}
	if down.LeaseMS != 0 {
		t.Errorf("/events after the sleep: lease %d ms, want 0", down.LeaseMS)
	}
}
