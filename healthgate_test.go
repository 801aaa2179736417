package election_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// appHealth is a health check a test turns from passing to failing (with
// an error, or by hanging) and back.
type appHealth struct {
	failing atomic.Pointer[error]
	hanging atomic.Bool
}

func (h *appHealth) fail(err error) { h.failing.Store(&err) }
func (h *appHealth) hang()          { h.hanging.Store(true) }
func (h *appHealth) pass()          { h.failing.Store(nil); h.hanging.Store(false) }

func (h *appHealth) check(ctx context.Context) error {
	if h.hanging.Load() {
		<-ctx.Done()
		return nil // late: the election counts it failed
	}
	if err := h.failing.Load(); err != nil {
		return *err
	}
	return nil
}

// gatedCandidate is an election with a health check, its wins, losses and
// health events.
type gatedCandidate struct {
	e      *election.Election
	health *appHealth
	won    chan uint64
	lost   chan error
	events chan election.Event // EventHealth only
}

const (
	healthInterval = 100 * time.Millisecond
	healthFailures = 3
)

// startGated starts candidate name of key on b with a health check that
// runs every healthInterval, and whose healthFailures failures in a row
// make it stand down; it is stopped when the test ends.
func startGated(t *testing.T, b *election.Bucket, name, key string, health *appHealth, opts ...election.Option) *gatedCandidate {
	t.Helper()
	g := &gatedCandidate{health: health, won: make(chan uint64, 16), lost: make(chan error, 16), events: make(chan election.Event, 64)}
	opts = append([]election.Option{
		election.WithHealthCheck(health.check, healthInterval, healthFailures),
		election.OnWon(func(ctx context.Context) {
			token, _ := election.TokenFromContext(ctx)
			g.won <- token
		}),
		election.OnLost(func(cause error) { g.lost <- cause }),
		election.WithEventHook(func(ev election.Event) {
			if ev.Kind == election.EventHealth {
				g.events <- ev
			}
		}),
	}, opts...)
	e, err := b.NewElection(name, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	g.e = e
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	t.Cleanup(func() {
		e.Stop()
		if err := <-done; err != nil {
			t.Errorf("Start of %s: %v", name, err)
		}
	})
	return g
}

// TestFailingHealthCheckHandsLeadershipOver makes a leader's health check
// fail, by an error and by hanging past its interval: within healthFailures
// checks it stands down with ErrHealthCheck and releases the key, and the
// other candidate leads at once, well within a TTL (an expiry would take
// one).
func TestFailingHealthCheckHandsLeadershipOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fails func(h *appHealth)
		says  string
	}{
		{"an error", func(h *appHealth) { h.fail(errors.New("database unreachable")) }, "database unreachable"},
		{"a check that hangs", (*appHealth).hang, "its time of 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := testenv.Server(t)
			_, js := testenv.Connect(t, s.ClientURL())
			const ttl = 4 * time.Second
			kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "GATED", TTL: ttl})
			b := openBucket(t, kv)

			a := startGated(t, b, "a", "svc", &appHealth{}, election.WithoutSplay())
			<-a.won
			other := startGated(t, b, "b", "svc", &appHealth{}, election.WithoutSplay())
			awaitCandidates(t, b, "svc", 2)

			began := time.Now()
			tc.fails(a.health)
			var cause error
			select {
			case cause = <-a.lost:
			case <-time.After(ttl):
				t.Fatalf("the leader still leads %v after its health check began to fail", ttl)
			}
			stoodDown := time.Since(began)
			if !errors.Is(cause, election.ErrHealthCheck) || !strings.Contains(cause.Error(), tc.says) {
				t.Fatalf("the leader stood down for %v, want ErrHealthCheck saying %q", cause, tc.says)
			}
			// healthFailures checks fail, the first at most an interval after
			// the failure began; a check that hangs takes its whole interval.
			if limit := (healthFailures+1)*healthInterval + 500*time.Millisecond; stoodDown > limit {
				t.Errorf("the leader stood down %v after its check began to fail, want within %v", stoodDown, limit)
			}
			select {
			case <-other.won:
			case <-time.After(ttl / 2):
				t.Fatalf("the other candidate did not lead within %v of the failure: the key was not released", ttl/2)
			}
			t.Logf("stood down %v and the other led %v after the check began to fail", stoodDown.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
			ev := <-a.events
			if !errors.Is(ev.Err, election.ErrHealthCheck) || ev.Key != "svc" || ev.Name != "a" {
				t.Errorf("the leader's health event: %+v, want one with ErrHealthCheck for a of svc", ev)
			}

			// It claims nothing while failing, and its record says why.
			cands := awaitCandidates(t, b, "svc", 2)
			for _, c := range cands {
				if c.Name == "a" && !strings.Contains(c.Unhealthy, tc.says) {
					t.Errorf("a's record says Unhealthy %q, want it to name %q", c.Unhealthy, tc.says)
				}
				if c.Name == "b" && c.Unhealthy != "" {
					t.Errorf("b's record says Unhealthy %q, want nothing", c.Unhealthy)
				}
			}
			// Passing again, it campaigns again: it takes the key when the
			// other stops.
			a.health.pass()
			ev = <-a.events
			if ev.Err != nil {
				t.Errorf("the health event on passing again: %+v, want no error", ev)
			}
			other.e.Stop()
			select {
			case <-a.won:
			case <-time.After(ttl):
				t.Fatal("the healthy again candidate did not lead once the other stopped")
			}
		})
	}
}

// TestFailingCandidateNeverClaims starts a candidate whose check fails
// from the start, of a higher priority than a healthy one, alone on the key
// first: it never claims, does not hold back the lower priority, and
// Resign and Transfer do not hand the key to it.
func TestFailingCandidateNeverClaims(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	// At TTL 10 s, a candidate whose priority is not the default waits a
	// listing window of 1 s before its first claim, and 1 s more for each
	// live higher priority.
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "GATEDSTART", TTL: 10 * time.Second})
	b := openBucket(t, kv)

	sick := &appHealth{}
	sick.fail(errors.New("no disk"))
	high := startGated(t, b, "high", "svc", sick, election.WithPriority(5))
	if ev := <-high.events; !errors.Is(ev.Err, election.ErrHealthCheck) || !strings.Contains(ev.Err.Error(), "no disk") {
		t.Fatalf("the failing candidate's first health event: %+v, want ErrHealthCheck naming no disk", ev)
	}
	testenv.Poll(t, "the failing candidate's record to say why", 5*time.Second, func() ([]election.Candidate, bool) {
		cands, err := b.Candidates(context.Background(), "svc")
		return cands, err == nil && len(cands) == 1 && strings.Contains(cands[0].Unhealthy, "no disk")
	})

	began := time.Now()
	low := startGated(t, b, "low", "svc", &appHealth{}, election.WithPriority(1))
	<-low.won
	// A healthy higher priority would hold the lower one back a second
	// more than its listing window.
	if took := time.Since(began); took > 1700*time.Millisecond {
		t.Errorf("the healthy lower priority led %v after it started, want right after its listing window of 1s: the failing higher one held it back", took)
	}
	select {
	case <-high.won:
		t.Fatal("the candidate whose health check fails led")
	default:
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The winner may announce before the Bucket's watcher delivers its claim.
	testenv.Poll(t, "the Bucket to show low leading", 5*time.Second, func() (election.Leader, bool) {
		l, err := b.Leader(ctx, "svc")
		return l, err == nil && l.Name == "low"
	})
	if _, err := b.Resign(ctx, "svc"); !errors.Is(err, election.ErrNotTransferred) || !strings.Contains(err.Error(), "health check") {
		t.Errorf("Resign with only a failing other candidate: %v, want ErrNotTransferred naming the health check", err)
	}
	if _, err := b.Transfer(ctx, "svc", "high"); !errors.Is(err, election.ErrNotTransferred) || !strings.Contains(err.Error(), "no disk") {
		t.Errorf("Transfer to a failing candidate: %v, want ErrNotTransferred naming its check's error", err)
	}
	if !low.e.IsLeader() {
		t.Error("the leader stood down on a request that should not have been sent")
	}
}

// TestWithHealthCheckRejectsBadInput checks that NewElection names what is
// wrong with a health check's arguments.
func TestWithHealthCheckRejectsBadInput(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "GATEDINPUT", TTL: 2 * time.Second})
	ok := func(context.Context) error { return nil }
	for _, tc := range []struct {
		check    func(context.Context) error
		interval time.Duration
		failures int
		says     string
	}{
		{nil, time.Second, 1, "nil check"},
		{ok, 0, 1, "interval 0s, want at least 10ms"},
		{ok, time.Millisecond, 1, "interval 1ms, want at least 10ms"},
		{ok, time.Second, 0, "failures 0, want at least 1"},
		{ok, time.Second, -2, "failures -2, want at least 1"},
	} {
		_, err := election.NewElection(context.Background(), "a", "svc", kv, election.WithHealthCheck(tc.check, tc.interval, tc.failures))
		if !errors.Is(err, election.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("WithHealthCheck(%v, %d): %v, want ErrInvalidArgument saying %q", tc.interval, tc.failures, err, tc.says)
		}
	}
}

func openBucket(t *testing.T, kv jetstream.KeyValue) *election.Bucket {
	t.Helper()
	b, err := election.OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func awaitCandidates(t *testing.T, b *election.Bucket, key string, n int) []election.Candidate {
	t.Helper()
	return testenv.Poll(t, fmt.Sprintf("%d candidates of %s", n, key), 5*time.Second, func() ([]election.Candidate, bool) {
		cands, err := b.Candidates(context.Background(), key)
		return cands, err == nil && len(cands) == n
	})
}
