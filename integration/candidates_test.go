package integration

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
)

// candidateNames returns the names Candidates lists for key k.
func candidateNames(t *testing.T, b *election.Bucket) []string {
	t.Helper()
	candidates, err := b.Candidates(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range candidates {
		if c.Key != "k" || c.Since.IsZero() {
			t.Errorf("candidate %+v: want key k and a start time", c)
		}
		names = append(names, c.Name)
	}
	return names
}

// TestCandidatesShowWhoCampaigns runs three candidates, one with a name
// that is not a valid key, and checks every process sees them all; one that
// stops is gone at once, one that crashes once its record ages out.
func TestCandidatesShowWhoCampaigns(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "CANDIDATES")
	b := openBucket(t, admin)
	odd := "node 3.example/é"
	var elections []*election.Election
	var crashConn = func() {}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for i, name := range []string{"node-1", "node-2", odd} {
		nc, js := testenv.Connect(t, s.ClientURL())
		kv, err := js.KeyValue(ctx, "CANDIDATES")
		if err != nil {
			t.Fatal(err)
		}
		e, err := election.NewElection(name, "k", kv, election.WithoutSplay(), election.WithLogger(testenv.Logger(t).With("candidate", name)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Stop)
		go e.Start(ctx)
		elections = append(elections, e)
		if i == 1 {
			crashConn = nc.Close
		}
	}
	testenv.Poll(t, "the three candidates listed", awaitTimeout, func() ([]string, bool) {
		names := candidateNames(t, b)
		return names, slices.Equal(names, []string{"node 3.example/é", "node-1", "node-2"})
	})

	elections[0].Stop()
	testenv.Poll(t, "node-1 gone after its Stop", awaitTimeout, func() ([]string, bool) {
		names := candidateNames(t, b)
		return names, !slices.Contains(names, "node-1")
	})

	crashed := time.Now()
	crashConn() // node-2 can no longer write or delete its record
	gone := testenv.Poll(t, "node-2 gone after its connection closed", awaitTimeout, func() (time.Duration, bool) {
		names := candidateNames(t, b)
		return time.Since(crashed), !slices.Contains(names, "node-2")
	})
	t.Logf("a crashed candidate dropped out of the list %v after it lost its connection (TTL %v)", gone.Round(time.Millisecond), ttl)
	if names := candidateNames(t, b); !slices.Equal(names, []string{odd}) {
		t.Errorf("candidates %q, want only %q", names, odd)
	}

	all, err := b.AllCandidates(ctx)
	if err != nil || len(all) != 1 || len(all["k"]) != 1 {
		t.Errorf("AllCandidates: %v, %v; want key k with one candidate", all, err)
	}
	if leaders, err := b.Leaders(ctx); err != nil || len(leaders) > 1 {
		t.Errorf("Leaders: %v, %v; want at most key k, no candidate records", leaders, err)
	}
}

// TestWithoutPresenceKeepsACandidateUnlisted runs a candidate that writes
// no record beside a leader that does: only the leader is listed, and a
// transfer to the other is refused.
func TestWithoutPresenceKeepsACandidateUnlisted(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "UNLISTED")
	b := openBucket(t, admin)
	shown := startGroup(t, "shown", "k", handles(t, s.ClientURL(), "UNLISTED", 1))
	shown.awaitWin()
	hidden := startGroup(t, "hidden", "k", handles(t, s.ClientURL(), "UNLISTED", 1), election.WithoutPresence())
	testenv.Eventually(t, "the unlisted candidate campaigning", awaitTimeout, func() bool {
		return hidden.elections["hidden-0"].State() == election.CandidateState
	})
	if names := candidateNames(t, b); !slices.Equal(names, []string{"shown-0"}) {
		t.Errorf("candidates %q, want shown-0 alone", names)
	}
	if _, err := b.Transfer(context.Background(), "k", "hidden-0"); !errors.Is(err, election.ErrNotCandidate) {
		t.Errorf("Transfer to the unlisted candidate: %v, want ErrNotCandidate", err)
	}
}

// TestMetadataTravelsWithTheCandidate publishes a node's metadata with its
// candidacy: every process reads it back.
func TestMetadataTravelsWithTheCandidate(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "METADATA")
	b := openBucket(t, admin)
	meta := map[string]string{"zone": "eu-west-1a", "capacity": "4", "version": "1.2.3"}
	startGroup(t, "node", "k", handles(t, s.ClientURL(), "METADATA", 1), election.WithMetadata(meta))
	meta["zone"] = "changed after the option was made"
	candidates := testenv.Poll(t, "the candidate listed", awaitTimeout, func() ([]election.Candidate, bool) {
		candidates, err := b.Candidates(context.Background(), "k")
		return candidates, err == nil && len(candidates) == 1
	})
	if got := candidates[0].Metadata; got["zone"] != "eu-west-1a" || got["capacity"] != "4" || got["version"] != "1.2.3" || len(got) != 3 {
		t.Errorf("metadata %v, want the three given", got)
	}

	for name, opts := range map[string][]election.Option{
		"too large":        {election.WithMetadata(map[string]string{"blob": strings.Repeat("x", 5000)})},
		"an empty key":     {election.WithMetadata(map[string]string{"": "x"})},
		"without a record": {election.WithMetadata(map[string]string{"zone": "a"}), election.WithoutPresence()},
	} {
		if _, err := election.NewElection("a", "k", admin, opts...); !errors.Is(err, election.ErrInvalidMetadata) {
			t.Errorf("%s: %v, want ErrInvalidMetadata", name, err)
		}
	}
}
