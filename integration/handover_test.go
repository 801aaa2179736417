package integration

import (
	"context"
	"encoding/base64"
	"errors"
	"github.com/kvelect/election/internal/testenv"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go/jetstream"
)

// handoverSetup starts three candidates for key k, each on its own
// connection, and a Bucket without elections on another; it returns them,
// with that connection's bucket handle, once one leads.
func handoverSetup(t *testing.T, bucket string) (*group, *election.Bucket, event) {
	g, b, _, leader := handoverSetupWithAdmin(t, bucket)
	return g, b, leader
}

func handoverSetupWithAdmin(t *testing.T, bucket string) (*group, *election.Bucket, jetstream.KeyValue, event) {
	t.Helper()
	s, admin := serverWithBucket(t, bucket)
	g := startGroup(t, "c", "k", handles(t, s.ClientURL(), bucket, 3))
	leader := g.awaitWin()
	// Opened after the claim, so the watcher's first reading shows the leader.
	b := openBucket(t, admin)
	// A lone candidate leads at once, maybe before the others' records are
	// out: a transfer names a listed candidate.
	testenv.Eventually(t, "all three candidates listed", awaitTimeout, func() bool {
		candidates, err := b.Candidates(context.Background(), "k")
		return err == nil && len(candidates) == 3
	})
	return g, b, admin, leader
}

// openBucket opens kv as a Bucket, closed when the test ends.
func openBucket(t *testing.T, kv jetstream.KeyValue) *election.Bucket {
	t.Helper()
	b, err := election.OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// observe collects what Observe delivers for key k.
func observe(t *testing.T, b *election.Bucket) <-chan election.Leader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	changes, err := b.Observe(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	return changes
}

// expectChanges reads the next changes from an observer and checks their
// holders' names. A "" (nobody: a release or a handoff) may be missing: the
// server skips a value that the next claim replaced before it reached the
// observer's watcher.
func expectChanges(t *testing.T, changes <-chan election.Leader, names ...string) {
	t.Helper()
	for i := 0; i < len(names); i++ {
		select {
		case l := <-changes:
			if names[i] == "" && l.Name != "" && i+1 < len(names) {
				i++ // the release was replaced before the watcher got it
			}
			if l.Name != names[i] {
				t.Fatalf("observer got holder %q, want %q", l.Name, names[i])
			}
		case <-time.After(awaitTimeout):
			t.Fatalf("observer got no change within %v, want holder %q", awaitTimeout, names[i])
		}
	}
}

func TestTransferHandsTheKeyToTheNamedCandidate(t *testing.T) {
	t.Parallel()
	g, b, leader := handoverSetup(t, "TRANSFER")
	changes := observe(t, b)
	expectChanges(t, changes, leader.name)
	target := "c-0"
	if leader.name == target {
		target = "c-1"
	}

	got, err := b.Transfer(context.Background(), "k", target)
	if err != nil || got.Name != target {
		t.Fatalf("Transfer to %s: %+v, %v", target, got, err)
	}
	lost := g.awaitLoss(leader.name)
	if !errors.Is(lost.cause, election.ErrHandedOver) {
		t.Errorf("%s stood down with cause %v, want ErrHandedOver", leader.name, lost.cause)
	}
	next := g.awaitWin()
	if next.name != target || next.token <= leader.token {
		t.Errorf("after the transfer %s won with token %d (old token %d), want %s", next.name, next.token, leader.token, target)
	}
	expectChanges(t, changes, "", target) // the handoff, then the target's claim

	// A transfer to the leader itself changes nothing.
	if got, err := b.Transfer(context.Background(), "k", target); err != nil || got.Name != target {
		t.Errorf("Transfer to the leader: %+v, %v", got, err)
	}
}

func TestResignLetsAnotherCandidateLead(t *testing.T) {
	t.Parallel()
	g, b, leader := handoverSetup(t, "RESIGN")
	got, err := b.Resign(context.Background(), "k")
	if err != nil || got.Name == "" || got.Name == leader.name {
		t.Fatalf("Resign of %s: %+v, %v", leader.name, got, err)
	}
	if lost := g.awaitLoss(leader.name); !errors.Is(lost.cause, election.ErrHandedOver) {
		t.Errorf("%s stood down with cause %v, want ErrHandedOver", leader.name, lost.cause)
	}
	if next := g.awaitWin(); next.name != got.Name {
		t.Errorf("%s won, Resign reported %s", next.name, got.Name)
	}
}

func TestTransferRefusesANameThatDoesNotCampaign(t *testing.T) {
	t.Parallel()
	g, b, leader := handoverSetup(t, "NOTCANDIDATE")
	got, err := b.Transfer(context.Background(), "k", "nobody")
	if !errors.Is(err, election.ErrNotCandidate) || got.Name != leader.name {
		t.Fatalf("Transfer to nobody: %+v, %v; want ErrNotCandidate and %s still leading", got, err, leader.name)
	}
	if !strings.Contains(err.Error(), "its candidates: c-0, c-1, c-2") {
		t.Errorf("the error %q does not list the candidates", err)
	}
	if token := g.elections[leader.name].Token(); token != leader.token {
		t.Errorf("after a refused transfer %s leads with token %d, want %d still", leader.name, token, leader.token)
	}
}

// TestTransferToACandidateThatVanishedFallsBack names a candidate whose
// record is live but whose process is gone (a crash a moment ago): after
// half a TTL another candidate claims the key.
func TestTransferToACandidateThatVanishedFallsBack(t *testing.T) {
	t.Parallel()
	_, b, admin, leader := handoverSetupWithAdmin(t, "VANISHED")
	record := "_kvelect.candidate.k." + base64.RawURLEncoding.EncodeToString([]byte("ghost"))
	if _, err := admin.Put(context.Background(), record, []byte(`{"name":"ghost","since":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "ghost among the candidates", awaitTimeout, func() bool {
		candidates, err := b.Candidates(context.Background(), "k")
		return err == nil && slices.ContainsFunc(candidates, func(c election.Candidate) bool { return c.Name == "ghost" })
	})
	got, err := b.Transfer(context.Background(), "k", "ghost")
	if !errors.Is(err, election.ErrNotTransferred) || got.Name == "" {
		t.Fatalf("Transfer to a vanished candidate: %+v, %v; want another leader and ErrNotTransferred", got, err)
	}
	if got.Name == leader.name {
		t.Logf("the old leader %s took the key back after the handoff's TTL", leader.name)
	}
}

func TestObserveStartsWithTheKeyEvenWhenNobodyHoldsIt(t *testing.T) {
	t.Parallel()
	_, admin := serverWithBucket(t, "NOBODY")
	b := openBucket(t, admin)
	first := <-observe(t, b)
	if first.Key != "k" || first.Name != "" {
		t.Errorf("first observation %+v, want key k held by nobody", first)
	}
}

func TestRequestsNeedALeader(t *testing.T) {
	t.Parallel()
	_, admin := serverWithBucket(t, "NOLEADER")
	b := openBucket(t, admin)
	if _, err := b.Resign(context.Background(), "k"); !errors.Is(err, election.ErrNoLeader) {
		t.Errorf("Resign with no leader: %v, want ErrNoLeader", err)
	}
	if _, err := b.Transfer(context.Background(), "k", "released:x"); !errors.Is(err, election.ErrInvalidArgument) {
		t.Errorf("Transfer to a bad name: %v, want ErrInvalidArgument", err)
	}
	if _, err := b.Resign(context.Background(), "_kvelect.request.k"); !errors.Is(err, election.ErrInvalidArgument) {
		t.Errorf("Resign of a request key: %v, want ErrInvalidArgument", err)
	}
}

func TestObserveReportsEachNewHolder(t *testing.T) {
	t.Parallel()
	g, b, admin, leader := handoverSetupWithAdmin(t, "OBSERVE")
	changes := observe(t, b)
	expectChanges(t, changes, leader.name)

	// Stop releases: nobody (unless the next claim replaced the release
	// before the watcher got it), then the next winner.
	g.elections[leader.name].Stop()
	next := g.awaitWin()
	expectChanges(t, changes, "", next.name)

	// Another client deletes the key: nobody, then a winner.
	if err := admin.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	third := g.awaitWin()
	expectChanges(t, changes, "", third.name)
}

// A leader that crashes never serves the request; Resign returns the
// candidate that claims the key once it aged out.
func TestResignReturnsTheSuccessorOfALeaderThatCrashed(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "CRASHED")
	kvs, proxies := proxied(t, s, "CRASHED", 3)
	g := startGroup(t, "c", "k", kvs)
	leader := g.awaitWin()
	b := openBucket(t, admin)

	proxies[leader.name].Close()
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	got, err := b.Resign(ctx, "k")
	if err != nil || got.Name == "" || got.Name == leader.name {
		t.Fatalf("Resign of the crashed %s: %+v, %v; want its successor", leader.name, got, err)
	}
}

// TestResignWithNoOtherCandidateRefusesAtOnce resigns a lone leader: Resign
// fails at once with ErrNotTransferred, without asking the leader, which
// keeps leading with the same token.
func TestResignWithNoOtherCandidateRefusesAtOnce(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "LONE")
	g := startGroup(t, "c", "k", handles(t, s.ClientURL(), "LONE", 1))
	leader := g.awaitWin()
	b := openBucket(t, admin)

	began := time.Now()
	got, err := b.Resign(context.Background(), "k")
	if !errors.Is(err, election.ErrNotTransferred) || got.Name != leader.name {
		t.Fatalf("Resign of the lone %s: %+v, %v; want ErrNotTransferred and %s still holding", leader.name, got, err, leader.name)
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("Resign took %v to refuse, want under a second", took)
	}
	if want := `no candidate but c-0 campaigns for key "k" of bucket "LONE", so c-0 keeps leading`; !strings.Contains(err.Error(), want) {
		t.Errorf("the error %q does not say %q", err, want)
	}
	if _, err := admin.Get(context.Background(), "_kvelect.request.k"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the request key: %v, want none written", err)
	}
	e := g.elections[leader.name]
	if !e.IsLeader() || e.Token() != leader.token {
		t.Errorf("after the refused resignation %s leads %v with token %d, want true, %d", leader.name, e.IsLeader(), e.Token(), leader.token)
	}
}
