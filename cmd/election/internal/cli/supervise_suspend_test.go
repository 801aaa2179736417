//go:build linux

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/leadtest"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// hangKV never answers an Update once hang is set (a hung link).
type hangKV struct {
	jetstream.KeyValue
	hang atomic.Bool
}

func (k *hangKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if k.hang.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return k.KeyValue.Update(ctx, key, value, last)
}

// suspendedLeader leads key "job" of kv on a clock whose suspends the test
// makes (clk.Sleep), and supervises, as run does, a guarded command that
// ignores SIGTERM with a grace of 5 s. It returns the leadership, the file
// the command notes each SIGTERM in, and when supervise returned.
func suspendedLeader(t *testing.T, kv jetstream.KeyValue, clk election.Clock) (leading context.Context, terms string, supervised <-chan time.Time) {
	t.Helper()
	leading, _ = leadtest.Lead(t, kv, e2e.WaitTimeout, election.WithClock(clk), election.WithLogger(testenv.Logger(t)))
	token, _ := election.TokenFromContext(leading)

	terms = filepath.Join(t.TempDir(), "terms")
	mark := testenv.NewMark()
	script := testenv.WithMark(`trap "echo TERM >> `+terms+`" TERM; while :; do sleep MARK; done`, mark)
	c, err := startGuarded(leading, []string{"/bin/sh", "-c", script}, os.Environ(), token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Kill(); <-c.Done() })
	testenv.AwaitSleeps(t, mark, 1, e2e.WaitTimeout)

	log := logrus.New()
	log.SetOutput(&syncBuffer{})
	g := guarded{child: c, grace: 5 * time.Second, what: "command", who: "this process", log: log.WithField("test", t.Name())}
	returned := make(chan time.Time, 1)
	go func() {
		g.supervise(leading, nil, nil, func(bool) {})
		returned <- time.Now()
	}()
	return leading, terms, returned
}

// goneAfterResume waits until supervise returned, and reports how long
// after resumed, and whether the command got a SIGTERM.
func goneAfterResume(t *testing.T, supervised <-chan time.Time, resumed time.Time, terms string) (took time.Duration, termed bool) {
	t.Helper()
	select {
	case gone := <-supervised:
		data, _ := os.ReadFile(terms)
		return gone.Sub(resumed), strings.Contains(string(data), "TERM")
	case <-time.After(10 * time.Second):
		t.Fatal("the command was not stopped")
		return 0, false
	}
}

// TestASuspendNearTheValidityDeadlineKillsTheCommandAtOnce: a leader
// running a guarded command (that ignores SIGTERM, grace 5 s) whose
// renewals hang is suspended for 5 s, and resumes 3 ms before its validity
// deadline. Its key aged out during the sleep; a successor may lead. The
// leadership ends with ErrSuspended, so the command's tree is killed at
// once, without SIGTERM, not at the rest of its monotonic work deadline.
func TestASuspendNearTheValidityDeadlineKillsTheCommandAtOnce(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SUSPEND_NEAR", TTL: 2 * time.Second})
	hkv := &hangKV{KeyValue: kv}
	clk := &testenv.SuspendClock{}
	leading, terms, supervised := suspendedLeader(t, hkv, clk)

	hkv.hang.Store(true)
	time.Sleep(300 * time.Millisecond) // a renewal in flight lands; none after it
	workDeadline, ok := election.WorkDeadline(leading)
	if !ok {
		t.Fatal("the leadership ended before the suspend")
	}
	validUntil := workDeadline.Add(-election.TimingFor(2*time.Second, 0).WorkMargin())
	time.Sleep(time.Until(validUntil) - 3*time.Millisecond)
	clk.Sleep(5 * time.Second) // the machine slept 5 s; the monotonic clock counted none of it
	resumed := time.Now()
	took, termed := goneAfterResume(t, supervised, resumed, terms)
	t.Logf("leadership cause %v; the command's tree gone %v after the resume (the key aged out during the 5 s sleep); SIGTERM: %v; work deadline was %v after the resume",
		context.Cause(leading), took.Round(time.Millisecond), termed, workDeadline.Sub(resumed).Round(time.Millisecond))
	if termed {
		t.Errorf("after a suspend the command got SIGTERM (cause %v), want it killed at once without SIGTERM", context.Cause(leading))
	}
	if took > 100*time.Millisecond {
		t.Errorf("after a 5 s suspend the command ran on %v after the resume, want killed at once", took.Round(time.Millisecond))
	}
}

// TestASuspendWhileTheCommandStopsKillsItAtOnce: a leader's key is
// deleted; it stands down (ErrRevisionGone) and its guarded command, which
// ignores SIGTERM (grace 5 s), is stopping: SIGTERM, then the kill at the
// work deadline. Then the machine is suspended for 5 s. Meanwhile, in real
// time, the work deadline and the draining mark's time pass, and another
// candidate may lead; the grace and the guard's deadline, on the monotonic
// clock, did not count the sleep. The command is gone within a poll of the
// resume (stop's drain watch), not at its monotonic work deadline.
func TestASuspendWhileTheCommandStopsKillsItAtOnce(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SUSPEND_DRAIN", TTL: 2 * time.Second})
	clk := &testenv.SuspendClock{}
	leading, terms, supervised := suspendedLeader(t, kv, clk)

	workDeadline, ok := election.WorkDeadline(leading)
	if !ok {
		t.Fatal("the leadership ended before the delete")
	}
	if err := kv.Delete(context.Background(), "job"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the command's SIGTERM", 5*time.Second, func() bool {
		data, _ := os.ReadFile(terms)
		return strings.Contains(string(data), "TERM")
	})
	clk.Sleep(5 * time.Second) // suspended 5 s while the command stops
	resumed := time.Now()
	took, _ := goneAfterResume(t, supervised, resumed, terms)
	t.Logf("leadership cause %v; the command's tree gone %v after the resume from a 5 s suspend (its work deadline, monotonic, was %v after the resume)",
		context.Cause(leading), took.Round(time.Millisecond), workDeadline.Sub(resumed).Round(time.Millisecond))
	if took > 100*time.Millisecond {
		t.Errorf("after a 5 s suspend the stopping command ran on %v after the resume, want killed at once: its work deadline passed in real time during the sleep", took.Round(time.Millisecond))
	}
}
