package integration

import (
	"context"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNoRetryRunWhoseHostDiedIsNotRunAgain: NoRetry is "for a job
// that must not run twice even after it failed". a's Once (RecordRuns,
// DoneFor an hour, NoRetry) records its run's start and begins the work;
// then a's host dies (its connection closes: nothing more is written). b's
// Once, with the same options, takes the key once a's has aged out: the
// log's latest record of the job is a's start with no outcome, so the work
// may have run, wholly or in part. With NoRetry, b must not run it again.
// Under NoRetry the start record is a mark of DoneFor already.
func TestNoRetryRunWhoseHostDiedIsNotRunAgain(t *testing.T) {
	t.Parallel()
	const bucket = "NORETRY_DEAD"
	s, _ := serverWith(t, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl, History: 10})
	_, js := testenv.Connect(t, s.ClientURL())
	h, err := history.Create(context.Background(), js, bucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	ncA, jsA := testenv.Connect(t, s.ClientURL())
	kvA, err := jsA.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	hA, err := history.Open(context.Background(), jsA, bucket)
	if err != nil {
		t.Fatal(err)
	}
	kvB := handles(t, s.ClientURL(), bucket, 1)[0]
	opts := []election.OnceOption{election.RecordRuns(h), election.DoneFor(time.Hour), election.NoRetry()}

	started := make(chan struct{})
	dead := make(chan struct{}) // a's work never gets further; closed as the test ends
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		_, _ = onceElection(t, kvA, "a").Once(context.Background(), 0, func(context.Context) error {
			close(started)
			<-dead
			return nil
		}, election.RecordRuns(hA), election.DoneFor(time.Hour), election.NoRetry())
	}()
	t.Cleanup(func() { close(dead); <-aDone })
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("a's work did not start")
	}
	ncA.Close() // a's host dies mid-run

	ranB := false
	outcome, err := onceElection(t, kvB, "b").Once(context.Background(), 4*ttl, func(context.Context) error { ranB = true; return nil }, opts...)
	events, _ := h.Events(context.Background(), "job", time.Time{})
	var kinds []string
	for _, ev := range events {
		kinds = append(kinds, ev.Kind+":"+ev.Name)
	}
	t.Logf("b's Once = %v, %v, ran %v; the job's records: %v", outcome, err, ranB, kinds)
	if ranB {
		t.Errorf("b ran a NoRetry job again while the log's latest record is a's start with no outcome (a's host died mid-run)")
	}
}
