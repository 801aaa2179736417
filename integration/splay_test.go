package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// splayTTL makes the start delay, if any, up to 5 s: long against what the
// tests below allow.
const splayTTL = 10 * time.Second

// startSplayed starts a candidate named name on kv with the start delay on
// (no WithoutSplay) and returns it with a channel closed when it leads.
func startSplayed(t *testing.T, kv jetstream.KeyValue, name string) (*election.Election, <-chan struct{}) {
	t.Helper()
	won := make(chan struct{})
	var first sync.Once
	e, err := election.NewElection(context.Background(), name, "k", kv,
		election.WithLogger(testenv.Logger(t).With("candidate", name)), election.OnWon(func() { first.Do(func() { close(won) }) }))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); e.Start(context.Background()) }()
	t.Cleanup(func() { e.Stop(); <-done })
	return e, won
}

// TestALoneCandidateOfAFreeKeyLeadsAtOnce: with nobody else listed for a
// free key, a candidate does not wait out a start delay.
func TestALoneCandidateOfAFreeKeyLeadsAtOnce(t *testing.T) {
	t.Parallel()
	s, _ := serverWith(t, jetstream.KeyValueConfig{Bucket: "LONE", TTL: splayTTL})
	kvs := handles(t, s.ClientURL(), "LONE", 1)
	started := time.Now()
	_, won := startSplayed(t, kvs[0], "lone")
	select {
	case <-won:
		if took := time.Since(started); took > time.Second {
			t.Errorf("the lone candidate led %v after it started, want well under a second", took)
		}
	case <-time.After(awaitTimeout):
		t.Fatal("the lone candidate never led")
	}
}

// TestATransferReachesACandidateJustStarted: a candidate that joins a held
// key campaigns at once, so a transfer to it as soon as it is listed
// succeeds instead of finding it still waiting out a start delay.
func TestATransferReachesACandidateJustStarted(t *testing.T) {
	t.Parallel()
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "JOINER", TTL: splayTTL})
	kvs := handles(t, s.ClientURL(), "JOINER", 2)
	_, leaderWon := startSplayed(t, kvs[0], "leader")
	select {
	case <-leaderWon:
	case <-time.After(awaitTimeout):
		t.Fatal("no leader")
	}
	b := openBucket(t, admin)
	startSplayed(t, kvs[1], "joiner")
	testenv.Eventually(t, "the joiner to be listed", awaitTimeout, func() bool {
		candidates, err := b.Candidates(context.Background(), "k")
		return err == nil && len(candidates) == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	if now, err := b.Transfer(ctx, "k", "joiner"); err != nil || now.Name != "joiner" {
		t.Errorf("transfer to a candidate just started: %v leads, %v; want joiner, nil", now.Name, err)
	}
}

// TestACandidateInItsStartDelayTakesAReleaseAtOnce starts b beside a listed
// candidate that claims nothing (its health check fails), so that b draws a
// start delay for the free key; a round counts once the delay is 2 s or
// more. Then a, without a delay, claims the key and stops at once,
// releasing it: b leads within a second of the release, not once its own
// delay has passed. (A crowd started together, whose first winner's
// health check fails or which is stopped at once, is in that spot.)
func TestACandidateInItsStartDelayTakesAReleaseAtOnce(t *testing.T) {
	t.Parallel()
	s, _ := serverWith(t, jetstream.KeyValueConfig{Bucket: "SPLAYREL", TTL: splayTTL})
	kvs := handles(t, s.ClientURL(), "SPLAYREL", 3)
	for round := 0; ; round++ {
		if round == 15 {
			t.Fatal("15 rounds drew no start delay of 2 s or more")
		}
		key := fmt.Sprintf("k%d", round)
		start := func(e *election.Election) func() {
			done := make(chan struct{})
			go func() { defer close(done); e.Start(context.Background()) }()
			return func() { e.Stop(); <-done }
		}
		sick, err := election.NewElection(context.Background(), "sick", key, kvs[0], election.WithoutSplay(),
			election.WithHealthCheck(func(context.Context) error { return errors.New("sick") }, election.MinHealthInterval, 1))
		if err != nil {
			t.Fatal(err)
		}
		stopSick := start(sick)
		delays := make(chan time.Duration, 1)
		bWon := make(chan time.Time, 1)
		b, err := election.NewElection(context.Background(), "b", key, kvs[1],
			election.WithLogger(slog.New(&startDelayLog{delays: delays})),
			election.OnWon(func() { bWon <- time.Now() }))
		if err != nil {
			t.Fatal(err)
		}
		stopB := start(b)
		var delay time.Duration
		select {
		case delay = <-delays:
		case <-time.After(awaitTimeout):
			t.Fatal("b drew no start delay beside a listed candidate of a free key")
		}
		if delay < 2*time.Second {
			stopB()
			stopSick()
			continue
		}

		aWon := make(chan struct{})
		a, err := election.NewElection(context.Background(), "a", key, kvs[2], election.WithoutSplay(),
			election.OnWon(func() { close(aWon) }))
		if err != nil {
			t.Fatal(err)
		}
		stopA := start(a)
		select {
		case <-aWon:
		case won := <-bWon:
			t.Fatalf("b led at %v, within its start delay of %v, before a claimed the free key", won, delay)
		case <-time.After(awaitTimeout):
			t.Fatal("a never led")
		}
		released := time.Now()
		stopA()
		select {
		case won := <-bWon:
			took := won.Sub(released)
			if took > time.Second {
				t.Errorf("b led %v after a released the key, want within a second (its start delay was %v)", took, delay)
			}
			t.Logf("round %d: b led %v after a released the key; its start delay was %v", round, took, delay.Round(time.Millisecond))
		case <-time.After(awaitTimeout):
			t.Error("b never led after a released the key")
		}
		stopB()
		stopSick()
		return
	}
}

// startDelayLog is a logger's handler that sends the start delay a
// candidate logs to delays, and drops every other record.
type startDelayLog struct{ delays chan<- time.Duration }

func (*startDelayLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *startDelayLog) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h *startDelayLog) WithGroup(string) slog.Handler          { return h }
func (h *startDelayLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "start delay") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "delay" {
			h.delays <- a.Value.Duration()
		}
		return true
	})
	return nil
}
