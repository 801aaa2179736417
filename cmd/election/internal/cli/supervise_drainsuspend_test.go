//go:build linux

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// TestASuspendWhileTheCommandStopsKillsItAtOnce: a leader's key is
// deleted; it stands down (ErrRevisionGone) and its guarded command, which
// ignores SIGTERM (grace 5 s), is stopping: SIGTERM, then the kill at the
// work deadline. 50 ms later the machine is suspended for 5 s. Meanwhile,
// in real time, the work deadline and the draining mark's time pass, and
// another candidate may lead; the grace and the guard's deadline, on the
// monotonic clock, did not count the sleep. The command is gone within a
// poll of the resume (stop's drain watch), not 1.5 s later.
func TestASuspendWhileTheCommandStopsKillsItAtOnce(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ATTACK_DRAINSUSP", TTL: 2 * time.Second})
	clk := &sleepClock{}
	won := make(chan context.Context, 1)
	e, err := election.NewElection(context.Background(), "a", "job", kv, election.WithoutSplay(), election.WithClock(clk),
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

	time.Sleep(200 * time.Millisecond)
	workDeadline, ok := election.WorkDeadline(leading)
	if !ok {
		t.Fatal("the leadership ended before the delete")
	}
	if err := kv.Delete(context.Background(), "job"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leading.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not stand down after the delete")
	}
	time.Sleep(50 * time.Millisecond)
	clk.sleep(5 * time.Second) // suspended 5 s while the command stops
	resumed := time.Now()
	var gone time.Time
	select {
	case gone = <-supervised:
	case <-time.After(10 * time.Second):
		t.Fatal("the command was not stopped")
	}
	took := gone.Sub(resumed)
	data, _ := os.ReadFile(terms)
	t.Logf("leadership cause %v; SIGTERM: %v; the command's tree gone %v after the resume from a 5 s suspend (its work deadline, monotonic, was %v after the resume)",
		context.Cause(leading), strings.Contains(string(data), "TERM"), took.Round(time.Millisecond), workDeadline.Sub(resumed).Round(time.Millisecond))
	if took > 100*time.Millisecond {
		t.Errorf("after a 5 s suspend the stopping command ran on %v after the resume, want killed at once: its work deadline passed in real time during the sleep", took.Round(time.Millisecond))
	}
}
