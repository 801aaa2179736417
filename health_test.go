package election_test

import (
	"context"
	"errors"
	"fmt"
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

// TestCheckHealthFailsWhileCampaignGoroutineIsStuck stalls a leader's
// campaign goroutine in its OnCampaign callback at a renewal, so that it
// still counts itself leader past its validity deadline, and checks that
// CheckHealth and HealthHandler report it, then recover once it is let go.
func TestCheckHealthFailsWhileCampaignGoroutineIsStuck(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "HEALTH", TTL: 2 * time.Second})

	stuck, release := make(chan struct{}), make(chan struct{})
	var stall sync.Once
	won := make(chan uint64, 4)
	lost := make(chan error, 4)
	e, err := election.NewElection(context.Background(), "a", "svc", kv, election.WithoutSplay(),
		election.OnWon(func(leading context.Context) {
			token, _ := election.TokenFromContext(leading)
			won <- token
		}),
		election.OnLost(func(cause error) { lost <- cause }),
		election.OnCampaign(func(s election.State) {
			if s == election.LeaderState { // a renewal: stall the first one
				stall.Do(func() {
					close(stuck)
					<-release
				})
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	handler := election.HealthHandler(0, e)
	if err := e.CheckHealth(0); err != nil {
		t.Fatalf("CheckHealth before Start: %v, want nil", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Start(ctx) }()
	defer func() { e.Stop(); <-done }()

	token := <-won
	if err := e.CheckHealth(0); err != nil {
		t.Fatalf("CheckHealth of a fresh leader: %v, want nil", err)
	}
	if code, body := get(handler); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("handler for a fresh leader: %d %q, want 200 \"ok\\n\"", code, body)
	}

	<-stuck
	err = testenv.Poll(t, "CheckHealth to fail while the campaign goroutine is stuck", 10*time.Second, func() (error, bool) {
		err := e.CheckHealth(0)
		return err, err != nil
	})
	if !errors.Is(err, election.ErrUnhealthy) {
		t.Fatalf("CheckHealth while stuck: %v, want ErrUnhealthy", err)
	}
	// The stuck leadership is the latest won: under load, the first may
	// have ended before its first renewal, and the stall caught the next.
	for more := true; more; {
		select {
		case token = <-won:
		default:
			more = false
		}
	}
	for _, says := range []string{`key "svc"`, `name "a"`, fmt.Sprintf("token %d", token), "after its validity deadline"} {
		if !strings.Contains(err.Error(), says) {
			t.Errorf("CheckHealth error %q does not say %q", err, says)
		}
	}
	if err := e.CheckHealth(time.Hour); err != nil {
		t.Errorf("CheckHealth(1h) while stuck less than an hour: %v, want nil", err)
	}
	if e.IsLeader() {
		t.Error("IsLeader is true past the validity deadline")
	}
	code, body := get(handler)
	if code != http.StatusServiceUnavailable || strings.Count(body, "\n") != 1 ||
		!strings.Contains(body, `key "svc" name "a"`) || !strings.Contains(body, election.ErrUnhealthy.Error()) {
		t.Fatalf("handler while stuck: %d %q, want 503 and one line naming the key and the candidate", code, body)
	}

	close(release)
	if cause := <-lost; !errors.Is(cause, election.ErrRenewDeadline) {
		t.Errorf("released leader stood down for %v, want ErrRenewDeadline", cause)
	}
	testenv.Poll(t, "CheckHealth to pass once the campaign goroutine is let go", 10*time.Second, func() (error, bool) {
		err := e.CheckHealth(0)
		return err, err == nil
	})
	if code, body := get(handler); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("handler after recovery: %d %q, want 200 \"ok\\n\"", code, body)
	}
}

func TestHealthHandlerRejectsBadInput(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "HEALTHINPUT", TTL: 2 * time.Second})
	e, err := election.NewElection(context.Background(), "a", "svc", kv)
	if err != nil {
		t.Fatal(err)
	}

	if err := e.CheckHealth(-time.Second); !errors.Is(err, election.ErrInvalidArgument) || !strings.Contains(err.Error(), "-1s") {
		t.Errorf("CheckHealth(-1s): %v, want ErrInvalidArgument naming -1s", err)
	}
	tests := []struct {
		name      string
		handler   http.Handler
		wantCode  int
		wantLines []string
	}{
		{"no elections", election.HealthHandler(0), http.StatusOK, []string{"ok"}},
		{"idle election", election.HealthHandler(time.Second, e), http.StatusOK, []string{"ok"}},
		{"negative tolerance", election.HealthHandler(-time.Second, e, e), http.StatusServiceUnavailable,
			[]string{"election: invalid argument: health check tolerance -1s: allowed: 0 or more"}},
		{"nil election", election.HealthHandler(0, e, nil), http.StatusServiceUnavailable,
			[]string{"election 2 of 2 passed to HealthHandler is nil"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(tt.handler)
			if want := strings.Join(tt.wantLines, "\n") + "\n"; code != tt.wantCode || body != want {
				t.Errorf("got %d %q, want %d %q", code, body, tt.wantCode, want)
			}
		})
	}
}

// get serves one GET request and returns the status and the body.
func get(h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return rec.Code, rec.Body.String()
}
