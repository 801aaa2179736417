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
	"github.com/nats-io/nats.go/jetstream"
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
// full of dots, a slash and an equals sign (the record's key ends with the
// name in base64, after the last dot), and checks every process sees them all; one that
// stops is gone at once, one that crashes once its record ages out.
func TestCandidatesShowWhoCampaigns(t *testing.T) {
	t.Parallel()
	s, admin := serverWithBucket(t, "CANDIDATES")
	b := openBucket(t, admin)
	odd := "node.3.example/a=b"
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
		e, err := election.NewElection(ctx, name, "k", kv, election.WithoutSplay(), election.WithLogger(testenv.Logger(t).With("candidate", name)))
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
		return names, slices.Equal(names, []string{"node-1", "node-2", odd})
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
		"too large":        {election.WithMetadata(map[string]string{"blob": strings.Repeat("x", 64<<10)})},
		"an empty key":     {election.WithMetadata(map[string]string{"": "x"})},
		"without a record": {election.WithMetadata(map[string]string{"zone": "a"}), election.WithoutPresence()},
	} {
		if _, err := election.NewElection(context.Background(), "a", "k", admin, opts...); !errors.Is(err, election.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// TestSetMetadataRepublishesAtOnce changes a running candidate's metadata:
// other processes read the new value well before the record's next refresh
// (a third of the 30 s TTL), and bad metadata is refused with the old kept.
func TestSetMetadataRepublishesAtOnce(t *testing.T) {
	t.Parallel()
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: "SETMETADATA", TTL: 30 * time.Second})
	b := openBucket(t, admin)
	kv := handles(t, s.ClientURL(), "SETMETADATA", 1)[0]
	e, err := election.NewElection(context.Background(), "node", "k", kv, election.WithoutSplay(), election.WithMetadata(map[string]string{"state": "starting"}))
	if err != nil {
		t.Fatal(err)
	}
	go e.Start(context.Background()) //nolint:errcheck // Stop ends it
	t.Cleanup(e.Stop)
	metadataIs := func(want string) func() bool {
		return func() bool {
			candidates, err := b.Candidates(context.Background(), "k")
			return err == nil && len(candidates) == 1 && candidates[0].Metadata["state"] == want
		}
	}
	testenv.Eventually(t, "the first metadata", awaitTimeout, metadataIs("starting"))
	changed := time.Now()
	if err := e.SetMetadata(map[string]string{"state": "running"}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the new metadata", awaitTimeout, metadataIs("running"))
	if took := time.Since(changed); took >= 10*time.Second {
		t.Errorf("the new metadata showed after %v, at the refresh; want it at once", took)
	}
	if err := e.SetMetadata(map[string]string{"": "x"}); !errors.Is(err, election.ErrInvalidArgument) {
		t.Errorf("SetMetadata with an empty key: %v, want ErrInvalidArgument", err)
	}
	hidden, err := election.NewElection(context.Background(), "hidden", "k", kv, election.WithoutPresence())
	if err != nil {
		t.Fatal(err)
	}
	if err := hidden.SetMetadata(map[string]string{"state": "x"}); !errors.Is(err, election.ErrInvalidArgument) {
		t.Errorf("SetMetadata without a record: %v, want ErrInvalidArgument", err)
	}
}
