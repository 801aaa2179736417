package history_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRunsAreAppendedByCompareAndSet: a key's runs start from none, each
// append lands only over the latest, and they read back with the server's
// stamp and sequence, apart from other keys' runs and from its leadership
// records.
func TestRunsAreAppendedByCompareAndSet(t *testing.T) {
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "RUNS", TTL: 2 * time.Second})
	h, err := history.Create(context.Background(), js, "RUNS", 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	last, now, err := h.LastRun(ctx, "job")
	if err != nil || last.Seq != 0 || now.IsZero() {
		t.Fatalf("LastRun of a key never run = %+v, %v, %v; want Seq 0 and the servers' time", last, now, err)
	}
	started, err := h.AppendRun(ctx, "job", election.Run{Name: "a", Token: 4}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AppendRun(ctx, "other", election.Run{Name: "b", Token: 9}, 0); err != nil {
		t.Fatalf("a first run of another key: %v", err)
	}
	if _, err := h.AppendRun(ctx, "job", election.Run{Name: "c", Token: 5}, 0); !errors.Is(err, election.ErrRunConflict) {
		t.Errorf("an append over no record when one exists: %v, want ErrRunConflict", err)
	}
	outcome := election.Run{Name: "a", Token: 4, Ended: true, Duration: time.Second, Status: 3, Error: "exit status 3", DoneFor: time.Hour}
	seq, err := h.AppendRun(ctx, "job", outcome, started)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AppendRun(ctx, "job", election.Run{Name: "c", Token: 5}, started); !errors.Is(err, election.ErrRunConflict) {
		t.Errorf("an append over a record no longer the latest: %v, want ErrRunConflict", err)
	}
	last, now, err = h.LastRun(ctx, "job")
	if err != nil || last.Seq != seq || last.Name != "a" || last.Token != 4 || !last.Ended || last.Status != 3 || last.Error != "exit status 3" ||
		last.DoneFor != time.Hour || last.Duration != time.Second || last.Stored.IsZero() || now.Before(last.Stored) {
		t.Errorf("LastRun = %+v, now %v, %v; want a's outcome at %d, stored no later than now", last, now, err, seq)
	}
	if _, err := h.AppendRun(ctx, "_kvelect.x", election.Run{}, 0); !errors.Is(err, election.ErrInvalidArgument) {
		t.Errorf("a run of a key that cannot be one: %v, want ErrInvalidArgument", err)
	}
	events, err := h.Events(ctx, "job", time.Time{})
	if err != nil || len(events) != 2 || events[0].Kind != history.RunStarted || events[1].Kind != history.Ran || events[1].Seq != seq {
		t.Errorf("the key's events: %+v (%v); want its run's start and outcome", events, err)
	}
	if all, err := h.Events(ctx, "", time.Time{}); err != nil || len(all) != 3 {
		t.Errorf("every key's events: %+v (%v); want three run records", all, err)
	}
}
