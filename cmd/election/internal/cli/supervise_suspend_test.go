//go:build linux

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// sleepClock is the machine's clock that can report a suspend which
// it did not count, as Linux's monotonic clock (and the guard's) does not.
type sleepClock struct {
	mu    sync.Mutex
	slept time.Duration
}

func (c *sleepClock) Now() time.Time                     { return time.Now() }
func (c *sleepClock) Real(d time.Duration) time.Duration { return d }
func (c *sleepClock) Suspended() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept
}
func (c *sleepClock) sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept += d
}

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
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACK_SUSPEND", TTL: 2 * time.Second})
	hkv := &hangKV{KeyValue: kv}
	clk := &sleepClock{}
	won := make(chan context.Context, 1)
	e, err := election.NewElection(context.Background(), "a", "job", hkv, election.WithoutSplay(), election.WithClock(clk),
		election.WithLogger(testenv.Logger(t)),
		election.OnWon(func(leading context.Context) {
			select {
			case won <- leading:
			default:
			}
			<-leading.Done()
		}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	t.Cleanup(func() { e.Stop(); <-done })
	var leading context.Context
	select {
	case leading = <-won:
	case <-time.After(e2e.WaitTimeout):
		t.Fatal("no leadership")
	}
	token, _ := election.TokenFromContext(leading)

	terms := filepath.Join(t.TempDir(), "terms")
	mark := testenv.NewMark()
	script := testenv.WithMark(`trap "echo TERM >> `+terms+`" TERM; while :; do sleep MARK; done`, mark)
	c, err := startGuarded(leading, []string{"/bin/sh", "-c", script}, os.Environ(), token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Kill(); <-c.Done() })
	testenv.AwaitSleeps(t, mark, 1, e2e.WaitTimeout)

	var logged syncBuffer
	log := logrus.New()
	log.SetOutput(&logged)
	g := guarded{child: c, grace: 5 * time.Second, what: "command", who: "this process", log: log.WithField("test", t.Name())}
	supervised := make(chan time.Time, 1)
	go func() {
		g.supervise(leading, nil, nil, func(bool) {})
		supervised <- time.Now()
	}()

	hkv.hang.Store(true)
	time.Sleep(300 * time.Millisecond) // a renewal in flight lands; none after it
	workDeadline, ok := election.WorkDeadline(leading)
	if !ok {
		t.Fatal("the leadership ended before the suspend")
	}
	validUntil := workDeadline.Add(-election.TimingFor(2*time.Second, 0).WorkMargin())
	time.Sleep(time.Until(validUntil) - 3*time.Millisecond)
	clk.sleep(5 * time.Second) // the machine slept 5 s; the monotonic clock counted none of it
	resumed := time.Now()
	var gone time.Time
	select {
	case gone = <-supervised:
	case <-time.After(10 * time.Second):
		t.Fatal("the command was not stopped")
	}
	took := gone.Sub(resumed)
	data, _ := os.ReadFile(terms)
	t.Logf("leadership cause %v; the command's tree gone %v after the resume (the key aged out during the 5 s sleep); SIGTERM: %v; work deadline was %v after the resume",
		context.Cause(leading), took.Round(time.Millisecond), strings.Contains(string(data), "TERM"), workDeadline.Sub(resumed).Round(time.Millisecond))
	if strings.Contains(string(data), "TERM") {
		t.Errorf("after a suspend the command got SIGTERM (cause %v), want it killed at once without SIGTERM", context.Cause(leading))
	}
	if took > 100*time.Millisecond {
		t.Errorf("after a 5 s suspend the command ran on %v after the resume, want killed at once", took.Round(time.Millisecond))
	}
}
