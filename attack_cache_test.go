package election_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// startBucketCandidate opens a Bucket on a fresh server and starts one
// election of it, "web" for key "job", publishing metadata; it returns
// the Bucket once its watcher lists the candidate.
func startBucketCandidate(t *testing.T, bucket string, metadata map[string]string) *election.Bucket {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: bucket, TTL: dupTTL})
	b, err := election.OpenBucket(context.Background(), admin, election.WithoutSplay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	e, err := b.NewElection("web", "job", election.WithLogger(testenv.Logger(t)), election.WithMetadata(metadata))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	go e.Start(context.Background())
	testenv.Eventually(t, "the watcher lists the candidate", awaitTimeout, func() bool {
		cs, err := b.Candidates(context.Background(), "job")
		return err == nil && len(cs) == 1 && cs[0].Metadata["zone"] == metadata["zone"]
	})
	return b
}

// TestCandidatesReturnsMetadataTheCallerOwns changes the metadata of a
// Candidate that Bucket.Candidates returned (a caller's own copy, as every
// call parsed the record anew before the watcher cached the parse): the
// next call, and AllCandidates, must still return what the candidate
// published. The watcher now caches each record parsed once per entry
// and hands every caller the cached record's map.
func TestCandidatesReturnsMetadataTheCallerOwns(t *testing.T) {
	t.Parallel()
	b := startBucketCandidate(t, "ATTMETA", map[string]string{"zone": "a"})
	cs, err := b.Candidates(context.Background(), "job")
	if err != nil || len(cs) != 1 {
		t.Fatalf("Candidates: %v, %v", cs, err)
	}
	cs[0].Metadata["zone"] = "changed by a caller"
	delete(cs[0].Metadata, "missing")

	again, err := b.Candidates(context.Background(), "job")
	if err != nil || len(again) != 1 {
		t.Fatalf("Candidates again: %v, %v", again, err)
	}
	if got := again[0].Metadata["zone"]; got != "a" {
		t.Errorf("after a caller changed its copy, Candidates returns zone %q, want the published %q: the callers share the watcher's cached record", got, "a")
	}
	all, err := b.AllCandidates(context.Background())
	if err != nil || len(all["job"]) != 1 {
		t.Fatalf("AllCandidates: %v, %v", all, err)
	}
	if got := all["job"][0].Metadata["zone"]; got != "a" {
		t.Errorf("AllCandidates returns zone %q, want the published %q", got, "a")
	}
}

// TestCandidatesOfTwoCallersDoNotRace has one goroutine write the metadata
// of its own Candidates result while another reads its own: under -race,
// shared maps show as a data race.
func TestCandidatesOfTwoCallersDoNotRace(t *testing.T) {
	t.Parallel()
	b := startBucketCandidate(t, "ATTMETARACE", map[string]string{"zone": "a"})
	var wg sync.WaitGroup
	deadline := time.Now().Add(200 * time.Millisecond)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for time.Now().Before(deadline) {
			cs, _ := b.Candidates(context.Background(), "job")
			for _, c := range cs {
				c.Metadata["seen"] = "writer" // its own result: the caller's to change
			}
		}
	}()
	go func() {
		defer wg.Done()
		for time.Now().Before(deadline) {
			cs, _ := b.Candidates(context.Background(), "job")
			for _, c := range cs {
				_ = c.Metadata["seen"]
			}
		}
	}()
	wg.Wait()
}
