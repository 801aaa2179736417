package election_test

import (
	"context"
	"encoding/base64"
	"fmt"
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
// of its own Candidates result and another, 20 ms later and with nothing
// ordering the two, read its own: under -race, shared maps show as a data
// race. (The accesses are spaced, not simultaneous, so that the runtime's
// own check of concurrent map access does not kill the test binary.)
//
// Not parallel: the race detector fails every test running when it
// reports, so this one runs alone.
func TestCandidatesOfTwoCallersDoNotRace(t *testing.T) {
	b := startBucketCandidate(t, "ATTMETARACE", map[string]string{"zone": "a"})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		cs, _ := b.Candidates(context.Background(), "job")
		for _, c := range cs {
			c.Metadata["seen"] = "writer" // its own result: the caller's to change
		}
	}()
	go func() {
		defer wg.Done()
		time.Sleep(20 * time.Millisecond)
		cs, _ := b.Candidates(context.Background(), "job")
		for _, c := range cs {
			_ = c.Metadata["seen"]
		}
	}()
	wg.Wait()
}

// TestCandidatesFollowRecordChangesAcrossWatcherRestarts changes a
// candidate record (its priority and metadata rewritten, the record
// deleted, purged, made invalid, written again) both while the Bucket's
// watcher follows and while its connection is cut (the watcher restarts
// and resyncs on reconnect): Candidates must show what the bucket holds
// each time, never a parse cached from an earlier entry.
func TestCandidatesFollowRecordChangesAcrossWatcherRestarts(t *testing.T) {
	t.Parallel()
	admin, p := proxiedBucket(t, "ATTRESYNC", 30*time.Second)
	_, kv := namedConn(t, p.URL(), "watcher", "ATTRESYNC")
	b, err := election.OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	key := "_kvelect.candidate.job." + base64.RawURLEncoding.EncodeToString([]byte("web"))
	record := func(priority int, zone string) []byte {
		return []byte(fmt.Sprintf(`{"name":"web","priority":%d,"since":"2026-01-01T00:00:00Z","metadata":{"zone":%q},"writer":{"instance":"abcdefabcdef","host":"h","pid":1}}`, priority, zone))
	}
	put := func(v []byte) {
		t.Helper()
		if _, err := admin.Put(context.Background(), key, v); err != nil {
			t.Fatal(err)
		}
	}
	// want waits until Candidates shows one candidate of priority and zone
	// (priority < 0: none).
	want := func(what string, priority int, zone string) {
		t.Helper()
		testenv.Poll(t, what, awaitTimeout, func() ([]election.Candidate, bool) {
			cs, err := b.Candidates(context.Background(), "job")
			if err != nil {
				return nil, false
			}
			if priority < 0 {
				return cs, len(cs) == 0
			}
			return cs, len(cs) == 1 && cs[0].Priority == priority && cs[0].Metadata["zone"] == zone
		})
		// And it stays so: the watcher read it, nothing else is coming.
		time.Sleep(50 * time.Millisecond)
		cs, _ := b.Candidates(context.Background(), "job")
		if priority < 0 && len(cs) != 0 || priority >= 0 && (len(cs) != 1 || cs[0].Priority != priority || cs[0].Metadata["zone"] != zone) {
			t.Fatalf("%s: Candidates then shows %+v", what, cs)
		}
	}

	put(record(1, "a"))
	want("the first record", 1, "a")
	put(record(5, "b"))
	want("the rewritten record", 5, "b")
	put([]byte(`{"name":"","priority":3}`))
	want("an invalid record: none", -1, "")
	put(record(2, "c"))
	want("a valid record again", 2, "c")
	if err := admin.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	want("the record deleted: none", -1, "")
	put(record(4, "d"))
	want("written after the delete", 4, "d")

	// Cut: changes the watcher hears of only as it resyncs.
	for i, change := range []func(){
		func() { put(record(7, "e")); put(record(8, "f")) },
		func() {
			if err := admin.Purge(context.Background(), key); err != nil {
				t.Fatal(err)
			}
		},
		func() { put(record(9, "g")) },
		func() { put([]byte(`not json`)) },
		func() { put(record(6, "h")) },
	} {
		p.Refuse()
		time.Sleep(100 * time.Millisecond)
		change()
		p.Heal()
		switch i {
		case 0:
			want("rewritten twice while cut", 8, "f")
		case 1:
			want("purged while cut: none", -1, "")
		case 2:
			want("written while cut", 9, "g")
		case 3:
			want("made invalid while cut: none", -1, "")
		case 4:
			want("valid again while cut", 6, "h")
		}
	}
}
