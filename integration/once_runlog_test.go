package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// runLogServer starts a server with bucket (TTL ttl, ten revisions of
// history per key) and its leadership history, and returns n bucket handles
// of their own connections, the history (the run log), and an admin handle.
func runLogServer(t *testing.T, bucket string, n int) ([]jetstream.KeyValue, *history.History, jetstream.KeyValue) {
	t.Helper()
	s, admin := serverWith(t, jetstream.KeyValueConfig{Bucket: bucket, TTL: ttl, History: 10})
	_, js := testenv.Connect(t, s.ClientURL())
	h, err := history.Create(context.Background(), js, bucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	return handles(t, s.ClientURL(), bucket, n), h, admin
}

// exitErr is a work's failure with an exit status, as a command's is.
type exitErr int

func (e exitErr) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitErr) ExitCode() int { return int(e) }

// runOutcomes returns the outcomes of key "job"'s runs in h, oldest first.
func runOutcomes(t *testing.T, h *history.History) []history.Event {
	t.Helper()
	events, err := h.Events(context.Background(), "job", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var out []history.Event
	for _, ev := range events {
		if ev.Kind == history.Ran {
			out = append(out, ev)
		}
	}
	return out
}

// TestOnceDoneForOutlastsTheBucketsTTL: a successful run with DoneFor a
// minute, on a bucket of TTL 2 s, marks the run log; once the key's own mark
// has aged out, a Once recording its runs in the log (without DoneFor of its
// own) returns OnceDone without running, while a Start-ed candidate of the
// key leads at once: the mark in the log keeps Once calls away, not
// elections.
func TestOnceDoneForOutlastsTheBucketsTTL(t *testing.T) {
	t.Parallel()
	kvs, h, admin := runLogServer(t, "DONE_FOR", 3)
	var token uint64
	outcome, err := onceElection(t, kvs[0], "a").Once(context.Background(), 0, func(ctx context.Context) error {
		token, _ = election.TokenFromContext(ctx)
		return nil
	}, election.RecordRuns(h), election.DoneFor(time.Minute))
	if outcome != election.OnceRan || err != nil {
		t.Fatalf("Once with DoneFor = %v, %v; want ran, nil", outcome, err)
	}
	if e, err := admin.Get(context.Background(), "job"); err != nil || string(e.Value()) != "done:a" {
		t.Errorf("the key holds %v (%v); want done:a, a mark of a minute being a TTL or more", e, err)
	}
	got := runOutcomes(t, h)
	if len(got) != 1 || got[0].Name != "a" || got[0].Token != token || got[0].Status != 0 || got[0].DoneFor != time.Minute ||
		got[0].Duration <= 0 || !got[0].Run().Succeeded() {
		t.Fatalf("the run log holds %+v; want a's successful run, token %d, done for a minute", got, token)
	}

	testenv.Eventually(t, "the key's own done mark to age out", 3*ttl, func() bool {
		_, err := admin.Get(context.Background(), "job")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	ran := false
	outcome, err = onceElection(t, kvs[1], "b").Once(context.Background(), 0, func(context.Context) error { ran = true; return nil }, election.RecordRuns(h))
	if outcome != election.OnceDone || err != nil || ran {
		t.Errorf("Once past the TTL, within the log's mark = %v, %v, ran %v; want done, nil, not run", outcome, err, ran)
	}
	if e, err := admin.Get(context.Background(), "job"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("after finding the mark, the key holds %v (%v); want nothing: the mark keeps Once from claiming the key", e, err)
	}
	g := startGroup(t, "s", "job", kvs[2:])
	g.awaitWin()
}

// TestOnceDoneForShorterThanTheTTLReleasesTheKey: a mark shorter than the
// TTL lives in the log alone, the key released at once; Once calls within
// it return OnceDone, and the work runs again once it has ended.
func TestOnceDoneForShorterThanTheTTLReleasesTheKey(t *testing.T) {
	t.Parallel()
	kvs, h, admin := runLogServer(t, "DONE_SHORT", 2)
	const d = 500 * time.Millisecond
	outcome, err := onceElection(t, kvs[0], "a").Once(context.Background(), 0, func(context.Context) error { return nil },
		election.RecordRuns(h), election.DoneFor(d))
	if outcome != election.OnceRan || err != nil {
		t.Fatalf("Once with DoneFor %v = %v, %v; want ran, nil", d, outcome, err)
	}
	ranAt := time.Now()
	if e, err := admin.Get(context.Background(), "job"); err != nil || string(e.Value()) != "released:a" {
		t.Errorf("after a run marked for less than a TTL the key holds %v (%v); want released:a", e, err)
	}
	for time.Since(ranAt) < d {
		outcome, err := onceElection(t, kvs[1], "b").Once(context.Background(), 0, func(context.Context) error { return nil }, election.RecordRuns(h))
		if outcome == election.OnceRan && time.Since(ranAt) < d {
			t.Fatalf("Once ran the work %v after a run marked done for %v (%v)", time.Since(ranAt), d, err)
		}
	}
	testenv.Eventually(t, "the work to run again once the mark has ended", 3*ttl, func() bool {
		outcome, _ := onceElection(t, kvs[1], "b").Once(context.Background(), 0, func(context.Context) error { return nil }, election.RecordRuns(h))
		return outcome == election.OnceRan
	})
}

// TestStartedCandidateWaitsForTheKeysMarkAlone bounds how long a Start-ed
// candidate of the key, started as a Once run returns, waits to lead: with
// a DoneFor of a TTL or more, the key's own mark keeps it away about a TTL
// (from half a TTL to a TTL and a second: the mark was written before Once
// returned), never as long as the log's mark; with a DoneFor shorter than
// the TTL, the key is released and it leads within that DoneFor.
func TestStartedCandidateWaitsForTheKeysMarkAlone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		doneFor  time.Duration
		min, max time.Duration
	}{
		{doneFor: time.Minute, min: ttl / 2, max: ttl + time.Second},
		{doneFor: 500 * time.Millisecond, min: 0, max: 500 * time.Millisecond},
	} {
		kvs, h, _ := runLogServer(t, fmt.Sprintf("STARTED_%d", c.doneFor.Milliseconds()), 2)
		outcome, err := onceElection(t, kvs[0], "a").Once(context.Background(), 0, func(context.Context) error { return nil },
			election.RecordRuns(h), election.DoneFor(c.doneFor))
		if outcome != election.OnceRan || err != nil {
			t.Fatalf("Once with DoneFor %v = %v, %v; want ran, nil", c.doneFor, outcome, err)
		}
		ran := time.Now()
		g := startGroup(t, "s", "job", kvs[1:])
		won := g.awaitWin()
		waited := won.at.Sub(ran)
		t.Logf("DoneFor %v, TTL %v: a Start-ed candidate led %v after the run returned", c.doneFor, ttl, waited.Round(time.Millisecond))
		if waited < c.min || waited > c.max {
			t.Errorf("DoneFor %v, TTL %v: a Start-ed candidate led %v after the run; want %v to %v", c.doneFor, ttl, waited, c.min, c.max)
		}
	}
}

// staleLog is a run log whose reads answer as a server that lags behind
// would, with no record at all, until an append over such a read has
// failed.
type staleLog struct {
	*history.History
	conflicted atomic.Bool // an append conflicted: reads answer fresh
}

func (l *staleLog) LastRun(ctx context.Context, key string) (election.Run, time.Time, error) {
	run, now, err := l.History.LastRun(ctx, key)
	if !l.conflicted.Load() {
		return election.Run{}, now, err
	}
	return run, now, err
}

func (l *staleLog) AppendRun(ctx context.Context, key string, run election.Run, over uint64) (uint64, error) {
	seq, err := l.History.AppendRun(ctx, key, run, over)
	if errors.Is(err, election.ErrRunConflict) {
		l.conflicted.Store(true)
	}
	return seq, err
}

// TestOnceTrustsNoReadThatShowsNoMark: a read of the run log that shows no
// mark (a lagging server's) is no proof; the compare-and-set of the run's
// first record over it fails, the next read shows the mark, and the work
// does not run. The candidate won the key by then: its stand-down's cause,
// as the history records it, names the mark.
func TestOnceTrustsNoReadThatShowsNoMark(t *testing.T) {
	t.Parallel()
	kvs, h, admin := runLogServer(t, "STALE_LOG", 2)
	if o, err := onceElection(t, kvs[0], "a").Once(context.Background(), 0, func(context.Context) error { return nil },
		election.RecordRuns(h), election.DoneFor(time.Hour)); o != election.OnceRan || err != nil {
		t.Fatalf("the first Once = %v, %v", o, err)
	}
	if err := admin.Delete(context.Background(), "job"); err != nil { // the key's own mark out of the way
		t.Fatal(err)
	}
	log := &staleLog{History: h}
	ran := false
	b, err := election.NewElection(context.Background(), "b", "job", kvs[1], election.WithoutSplay(), election.WithEventHook(h.Record),
		election.WithLogger(testenv.Logger(t).With("candidate", "b")))
	if err != nil {
		t.Fatal(err)
	}
	outcome, err := b.Once(context.Background(), 2*ttl, func(context.Context) error { ran = true; return nil }, election.RecordRuns(log))
	if outcome != election.OnceDone || err != nil || ran {
		t.Errorf("Once after a stale read of the log = %v, %v, ran %v; want done, nil, not run", outcome, err, ran)
	}
	if got := runOutcomes(t, h); len(got) != 1 {
		t.Errorf("the log holds %d runs, want the first one alone", len(got))
	}
	var cause string
	testenv.Eventually(t, "b's stand-down in the history", 5*time.Second, func() bool {
		events, err := h.Events(context.Background(), "job", time.Time{})
		for _, ev := range events {
			if ev.Kind == history.StoodDown && ev.Name == "b" {
				cause = ev.Cause
			}
		}
		return err == nil && cause != ""
	})
	if want := "the work did not run: the run log shows a done mark of a's run that stands until "; !strings.Contains(cause, want) {
		t.Errorf("b stood down because %q; want it to say %q", cause, want)
	} else {
		t.Logf("b stood down because %q", cause)
	}
}

// lossyLog is a run log whose appends apply, but whose first answer of
// each kind (a run's start, its outcome) is lost.
type lossyLog struct {
	*history.History
	mu   sync.Mutex
	lost map[bool]bool // by Run.Ended: an answer was lost
}

func (l *lossyLog) AppendRun(ctx context.Context, key string, run election.Run, over uint64) (uint64, error) {
	seq, err := l.History.AppendRun(ctx, key, run, over)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && !l.lost[run.Ended] {
		l.lost[run.Ended] = true
		return 0, context.DeadlineExceeded
	}
	return seq, err
}

// TestOnceRecordsRunsWhoseAnswersWereLost: a run's start and its outcome
// stored, their answers lost: Once finds each its own in the log and goes
// on; the run is recorded once, and its mark holds.
func TestOnceRecordsRunsWhoseAnswersWereLost(t *testing.T) {
	t.Parallel()
	kvs, h, _ := runLogServer(t, "LOSSY_LOG", 2)
	log := &lossyLog{History: h, lost: map[bool]bool{}}
	ran := 0
	outcome, err := onceElection(t, kvs[0], "a").Once(context.Background(), 0, func(context.Context) error { ran++; return nil },
		election.RecordRuns(log), election.DoneFor(time.Hour))
	if outcome != election.OnceRan || err != nil || ran != 1 {
		t.Fatalf("Once whose log answers were lost = %v, %v, ran %d times; want ran once, nil", outcome, err, ran)
	}
	if got := runOutcomes(t, h); len(got) != 1 || got[0].DoneFor != time.Hour {
		t.Errorf("the log holds runs %+v; want one, done for an hour", got)
	}
	events, err := h.Events(context.Background(), "job", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	for _, ev := range events {
		if ev.Kind == history.RunStarted {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("the log holds %d starts of the run, want 1", starts)
	}
}

// TestOnceRecordsFailuresWithTheirStatus: a failed run is recorded with its
// exit status and leaves no mark; with NoRetry it leaves one, and so does
// a run whose leadership ended before the work returned.
func TestOnceRecordsFailuresWithTheirStatus(t *testing.T) {
	t.Parallel()
	kvs, h, admin := runLogServer(t, "FAILURES", 3)
	outcome, err := onceElection(t, kvs[0], "a").Once(context.Background(), 0, func(context.Context) error { return exitErr(3) },
		election.RecordRuns(h), election.DoneFor(time.Hour))
	if outcome != election.OnceRan || !errors.Is(err, exitErr(3)) || errors.Is(err, election.ErrDoneUnconfirmed) {
		t.Fatalf("a failing Once = %v, %v; want ran, its error", outcome, err)
	}
	got := runOutcomes(t, h)
	if len(got) != 1 || got[0].Status != 3 || got[0].Error != "exit status 3" || got[0].DoneFor != 0 || got[0].Run().Succeeded() {
		t.Fatalf("the log holds %+v; want a's run of status 3 and no mark", got)
	}

	// NoRetry, and the key deleted while the work runs: the leadership
	// ends first, and the log's mark lands all the same.
	working := make(chan struct{})
	go func() {
		<-working
		if err := admin.Delete(context.Background(), "job"); err != nil {
			t.Error(err)
		}
	}()
	outcome, err = onceElection(t, kvs[1], "b").Once(context.Background(), 0, func(ctx context.Context) error {
		close(working)
		<-ctx.Done()
		return ctx.Err()
	}, election.RecordRuns(h), election.DoneFor(time.Hour), election.NoRetry())
	if outcome != election.OnceRan || !errors.Is(err, election.ErrWorkInterrupted) || errors.Is(err, election.ErrDoneUnconfirmed) {
		t.Fatalf("an interrupted Once with NoRetry = %v, %v; want ran, ErrWorkInterrupted, the mark confirmed", outcome, err)
	}
	got = runOutcomes(t, h)
	if len(got) != 2 || !got[1].Interrupted || got[1].DoneFor != time.Hour {
		t.Fatalf("the log holds %+v; want b's interrupted run, done for an hour", got)
	}
	ran := false
	outcome, err = onceElection(t, kvs[2], "c").Once(context.Background(), 2*ttl, func(context.Context) error { ran = true; return nil }, election.RecordRuns(h))
	if outcome != election.OnceDone || err != nil || ran {
		t.Errorf("Once after b's marked run = %v, %v, ran %v; want done, nil, not run", outcome, err, ran)
	}
}

// TestOnceRefusesBadOptions: DoneFor below 0, without a run log, or longer
// than the log keeps records.
func TestOnceRefusesBadOptions(t *testing.T) {
	t.Parallel()
	kvs, h, _ := runLogServer(t, "BAD_OPTIONS", 1)
	work := func(context.Context) error { t.Error("the work ran"); return nil }
	for name, opts := range map[string][]election.OnceOption{
		"a negative DoneFor":         {election.RecordRuns(h), election.DoneFor(-time.Second)},
		"DoneFor without a log":      {election.DoneFor(time.Hour)},
		"DoneFor past the retention": {election.RecordRuns(h), election.DoneFor(history.DefaultRetention)},
	} {
		if _, err := onceElection(t, kvs[0], "a").Once(context.Background(), 0, work, opts...); !errors.Is(err, election.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}
