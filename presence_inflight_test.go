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

// TestStopDuringARecordWriteLeavesNoRecord stops a candidate 200 ms from
// the server (each way) while a rewrite of its record (SetMetadata) is on
// its way back: the server applied it, its answer has not come. Stop lets
// the write finish and deletes the record over the revision it wrote, so
// after Stop the record is gone and Candidates does not list the candidate:
// "a candidate that stopped is gone at once" holds for a write in flight.
func TestStopDuringARecordWriteLeavesNoRecord(t *testing.T) {
	t.Parallel()
	admin, p := proxiedBucket(t, "STOPWRITE", 10*time.Second)
	nc, kv := namedConn(t, p.URL(), "web", "STOPWRITE")
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

// TestARestartIsNotRefusedForTheDeadRunsLastWrite: a candidate 500 ms
// from the server (each way) rewrites its record (SetMetadata), and its
// host dies right then: its link goes dark with the rewrite already on the
// wire (faultproxy: the chunk that passed is delivered, nothing after it).
// The name is restarted at once on another connection, which finds the
// dead run's record and waits to tell a crash from a live twin; the dead
// run's last write lands while it waits. One write after the record was
// found is not taken for a live twin (a live one writes twice within two
// thirds of a TTL): the restart leads, never refused.
func TestARestartIsNotRefusedForTheDeadRunsLastWrite(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DEADWRITE", TTL: 4 * time.Second})
	p, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	nc, kv := namedConn(t, p.URL(), "web-old", "DEADWRITE")
	old := startCandidate(t, nc, kv, "web", testenv.Logger(t).With("run", "old"), election.WithPriority(0))
	testenv.Eventually(t, "the old run's record", awaitTimeout, func() bool {
		_, _, ok := recordOf(t, admin, "job", "web")
		return ok
	})
	_, rev0, _ := recordOf(t, admin, "job", "web")

	p.Delay(500 * time.Millisecond)
	sent := p.Sent("last words")
	if err := old.e.SetMetadata(map[string]string{"state": "last words"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sent:
	case <-time.After(awaitTimeout):
		t.Fatal("the old run's rewrite did not reach the proxy")
	}
	p.Blackhole() // the host dies: nothing more leaves it

	nc2, kv2 := namedConn(t, s.ClientURL(), "web-new", "DEADWRITE")
	restarted := startCandidate(t, nc2, kv2, "web", testenv.Logger(t).With("run", "new"))
	testenv.Eventually(t, "the dead run's last write to land", awaitTimeout, func() bool {
		_, rev, _ := recordOf(t, admin, "job", "web")
		return rev > rev0
	})
	select {
	case err := <-restarted.ended:
		t.Errorf("the restart of a dead run was refused: %v", err)
	case <-restarted.won:
		t.Logf("the restart leads")
	case <-time.After(awaitTimeout):
		t.Fatal("the restart neither led nor ended")
	}
}
