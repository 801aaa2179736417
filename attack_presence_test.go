package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAttackStopDuringARecordWriteLeavesNoRecord: a candidate 200 ms from
// the server (each way) rewrites its record (SetMetadata) and is stopped
// while that write is on its way back: the server applied it, its answer
// has not come. Stop deletes the record by compare-and-set over the
// election's latest revision as it knows it; the revision it knows is the
// one before, so the delete is refused (a conflict, logged at no level),
// and the stopped candidate's record stays live for a TTL: Candidates
// lists it, and a restart of the name waits for it. Candidates' contract:
// "A candidate that stopped is gone at once".
//
// Hypothesis: present (presence.go) deletes over max(rev, the watcher's
// view), and a write cancelled by Stop whose answer was lost is in
// neither yet; deleteRecord treats the conflict as another run's record.
func TestAttackStopDuringARecordWriteLeavesNoRecord(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACK_STOPWRITE", TTL: 10 * time.Second})
	p, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	nc, kv := namedConn(t, p.URL(), "web", "ATTACK_STOPWRITE")
	a := startCandidate(t, nc, kv, "web", testenv.Logger(t), election.WithPriority(0))
	testenv.Eventually(t, "the candidate's record", awaitTimeout, func() bool {
		_, _, ok := recordOf(t, admin, "job", "web")
		return ok
	})

	p.Delay(200 * time.Millisecond)
	_, rev0, _ := recordOf(t, admin, "job", "web")
	if err := a.e.SetMetadata(map[string]string{"state": "draining"}); err != nil {
		t.Fatal(err)
	}
	// The rewrite reached the server; its answer is 200 ms away.
	testenv.Eventually(t, "the rewritten record on the server", awaitTimeout, func() bool {
		_, rev, ok := recordOf(t, admin, "job", "web")
		return ok && rev > rev0
	})
	stopped := time.Now()
	a.e.Stop()
	took := time.Since(stopped)
	p.Heal()

	w, rev, ok := recordOf(t, admin, "job", "web")
	b, err := election.OpenBucket(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	listed, err := b.Candidates(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop took %v; after it the record is there %v (revision %d, instance %s, stopped one %s); Candidates: %d", took.Round(time.Millisecond), ok, rev, w.Instance, a.e.Instance(), len(listed))
	if ok && w.Instance == a.e.Instance() {
		t.Errorf("after Stop returned, the stopped candidate's own record (revision %d) is still in the bucket, live for a TTL", rev)
	}
	for _, c := range listed {
		if c.Name == "web" {
			t.Errorf("Candidates lists the stopped candidate %q (instance %s) after its Stop returned", c.Name, c.Writer.Instance)
		}
	}
}
