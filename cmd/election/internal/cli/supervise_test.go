//go:build linux

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/leadtest"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// leadershipOn runs an election for key job of a new bucket on an embedded
// server and returns the context of its first leadership, its token, and
// a function that stops the election (it releases the key). The election
// stops when the test ends, if not before.
func leadershipOn(t *testing.T, bucket string) (leading context.Context, token uint64, stop func()) {
	t.Helper()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: bucket, TTL: election.MinTTL})
	leading, stop = leadtest.Lead(t, kv, e2e.WaitTimeout)
	token, _ = election.TokenFromContext(leading)
	return leading, token, stop
}

// TestSuperviseKillsAtOnceAfterASuspend ends a leadership, as the election
// does when the machine resumed from a suspend, with the cause
// election.ErrSuspended, while the command ignores SIGTERM: supervise kills
// the command's tree at once, sending no SIGTERM, long before the grace;
// its work deadline has passed in real time, though the monotonic clock of
// the grace and of the guard did not count the sleep. A leadership that
// ended for another cause gets the SIGTERM.
func TestSuperviseKillsAtOnceAfterASuspend(t *testing.T) {
	t.Parallel()
	leading, token, _ := leadershipOn(t, "SUSPEND")
	for _, tc := range []struct {
		cause error
		grace time.Duration
		term  bool // the command gets SIGTERM
	}{
		{cause: election.ErrSuspended, grace: 5 * time.Second},
		{cause: election.ErrRenewDeadline, grace: 300 * time.Millisecond, term: true},
	} {
		terms := filepath.Join(t.TempDir(), "terms")
		mark := testenv.NewMark()
		// The shell records each SIGTERM and sleeps on; the group's
		// SIGTERM kills the sleep, which it starts again.
		script := testenv.WithMark(`trap "echo TERM >> `+terms+`" TERM; while :; do sleep MARK; done`, mark)
		ended, end := context.WithCancelCause(leading)
		c, err := startGuarded(ended, []string{"/bin/sh", "-c", script}, os.Environ(), token)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Kill()
			<-c.Done()
		})
		testenv.AwaitSleeps(t, mark, 1, e2e.WaitTimeout)
		var logged syncBuffer
		log := logrus.New()
		log.SetOutput(&logged)
		g := guarded{child: c, grace: tc.grace, what: "command", who: "this process", log: log.WithField("test", t.Name())}
		end(tc.cause)
		began := time.Now()
		byItself, stopped := g.supervise(ended, nil, nil, func(bool) {})
		took := time.Since(began)
		t.Logf("cause %v: the command's tree gone %v after the leadership ended (grace %v)", tc.cause, took, tc.grace)
		if byItself || !stopped || !c.Exited() {
			t.Errorf("cause %v: supervise returned byItself %v, stopped %v, the command gone: %v; want it stopped", tc.cause, byItself, stopped, c.Exited())
		}
		if left := testenv.Marked(mark); len(left) > 0 {
			t.Errorf("cause %v: processes left: %v", tc.cause, left)
		}
		data, _ := os.ReadFile(terms)
		if got := strings.Contains(string(data), "TERM"); got != tc.term {
			t.Errorf("cause %v: the command got SIGTERM: %v, want %v", tc.cause, got, tc.term)
		}
		if !tc.term {
			if took >= tc.grace {
				t.Errorf("cause %v: the command was killed %v after the leadership ended, at the end of its grace %v, want at once", tc.cause, took, tc.grace)
			}
			wantLogged(t, logged.String(), "the machine was suspended: killing the command")
		}
		if code := c.ExitCode(); code != 128+int(syscall.SIGKILL) {
			t.Errorf("cause %v: the command exited %d, want %d: killed", tc.cause, code, 128+int(syscall.SIGKILL))
		}
	}
}
