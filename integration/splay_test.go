package integration

import (
	"context"
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
