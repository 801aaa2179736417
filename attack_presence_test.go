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

// TestAttackARestartIsNotRefusedForTheDeadRunsLastWrite: a candidate 500
// ms from the server (each way) rewrites its record (SetMetadata), and
// its host dies right then: its link goes dark with the rewrite already on
// the wire (faultproxy: the chunk in flight is delivered, nothing after
// it). The name is restarted at once on another connection, which finds
// the dead run's record and waits to tell a crash from a live twin. The
// dead run never writes again, but its last write lands after the restart
// looked; the restart takes it for a live twin's refresh and is refused
// with a *DuplicateError naming a run that is gone.
//
// Hypothesis: present (presence.go) refuses on the first write above the
// revision it found ("in.revision"), so a single write in flight when the
// old run died is enough; a live twin rewrites every third of a TTL, so
// requiring a rewrite after the one found would tell the two apart.
func TestAttackARestartIsNotRefusedForTheDeadRunsLastWrite(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	admin := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACK_DEADWRITE", TTL: 4 * time.Second})
	p, err := faultproxy.New(s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	nc, kv := namedConn(t, p.URL(), "web-old", "ATTACK_DEADWRITE")
	old := startCandidate(t, nc, kv, "web", testenv.Logger(t).With("run", "old"), election.WithPriority(0))
	testenv.Eventually(t, "the old run's record", awaitTimeout, func() bool {
		_, _, ok := recordOf(t, admin, "job", "web")
		return ok
	})
	_, rev0, _ := recordOf(t, admin, "job", "web")

	p.Delay(500 * time.Millisecond)
	if err := old.e.SetMetadata(map[string]string{"state": "last words"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the rewrite reach the proxy: no event to await for bytes on a wire
	p.Blackhole()                     // the host dies: nothing more leaves it

	nc2, kv2 := namedConn(t, s.ClientURL(), "web-new", "ATTACK_DEADWRITE")
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
