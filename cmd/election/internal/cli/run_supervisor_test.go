//go:build linux

package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/guard"
	"github.com/kvelect/election/internal/testenv"
	"github.com/kvelect/election/sidecar"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// TestRunCampaignsOnWhenLeadershipEndsBeforeTheCommandStarts runs election
// run's supervisor on an election whose first leadership ends before the
// supervisor gets to start COMMAND, as when the process is paused right
// after winning: it writes no leader file and starts no COMMAND for that
// leadership, does not end the election, and runs COMMAND when it leads
// again.
func TestRunCampaignsOnWhenLeadershipEndsBeforeTheCommandStarts(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LATE", TTL: election.MinTTL})
	starts, cmd := recordedStarts(t)
	leaderPath := filepath.Join(t.TempDir(), "leader")
	var logged bytes.Buffer
	log := logrus.New()
	log.SetOutput(&logged)
	electionCtx, endElection := context.WithCancel(context.Background())
	defer endElection()
	ended := false
	sup := newSupervisor(runConfig{candidateFlags: candidateFlags{name: "late", key: "job", bucket: "LATE"}, argv: cmd, grace: time.Second},
		log.WithField("test", t.Name()), func() {
			ended = true
			endElection()
		})
	leaderFile, err := sidecar.OpenLeaderFile(leaderPath, slogOf(log.WithField("test", t.Name())))
	if err != nil {
		t.Fatal(err)
	}
	sup.leaderFile = leaderFile

	firstToken := make(chan uint64, 1)
	leaderFileLeft := make(chan bool, 1)
	wins := 0
	e, err := election.NewElection(context.Background(), "late", "job", kv, election.WithoutSplay(),
		election.OnWon(func(leading context.Context) {
			wins++
			if wins == 1 {
				// The pause: the leadership ends before lead runs.
				token, _ := election.TokenFromContext(leading)
				firstToken <- token
				if err := kv.Delete(context.Background(), "job"); err != nil {
					t.Error(err)
				}
				<-leading.Done()
				sup.lead(leading)
				_, err := os.Stat(leaderPath)
				leaderFileLeft <- err == nil
				return
			}
			sup.lead(leading)
		}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Start(electionCtx) }()

	first := <-firstToken
	if <-leaderFileLeft {
		t.Error("the leader file was written for a leadership that had ended")
	}
	second := e2e.WaitStarts(t, starts, 1)[0]
	if second.Token <= first {
		t.Errorf("COMMAND started with token %d, want one above the ended leadership's %d", second.Token, first)
	}
	if data, err := os.ReadFile(leaderPath); err != nil || strings.TrimSpace(string(data)) != strconv.FormatUint(second.Token, 10) {
		t.Errorf("leader file: %q, %v; want the second leadership's token %d", data, err, second.Token)
	}
	endElection()
	if err := <-done; err != nil {
		t.Errorf("the election ended with %v", err)
	}
	e2e.WaitDead(t, second.PID)
	if ended || sup.exitCode() != 0 {
		t.Errorf("the supervisor ended the election (%v) or set exit code %d; want neither", ended, sup.exitCode())
	}
	wantLogged(t, logged.String(), "leadership ended before the command could start; campaigning again", "leading: started the command")
}

// TestRunExitsZeroOnASignalAfterTheWorkDeadlineKilledTheCommand runs election
// run's supervisor on a leadership that ends while COMMAND ignores the
// SIGTERM that stops it, so that the guard kills COMMAND at the work
// deadline, as it does when this process was paused past it. SIGTERM comes
// just after: once COMMAND has gone, before the supervisor has finished
// with it. COMMAND no longer ran when the signal came, so election run ends
// the election and exits 0, not with the 137 of the kill at the deadline.
// (TestRunPausedLosesItsCommandInTime, whose test sends SIGTERM as soon as
// the paused process logs the kill, once saw 137.)
func TestRunExitsZeroOnASignalAfterTheWorkDeadlineKilledTheCommand(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "EXPIRED", TTL: election.MinTTL})
	mark := testenv.NewMark()
	t.Cleanup(func() { awaitGone(t, mark) })
	var logged syncBuffer
	log := logrus.New()
	log.SetOutput(&logged)
	signals := make(chan os.Signal, 1)
	electionCtx, endElection := context.WithCancel(context.Background())
	defer endElection()
	ended := false
	var sup *supervisor
	// The signal comes the moment the supervisor logs the kill at the work
	// deadline, and is seen (the shutdown begins) before it goes on.
	log.AddHook(hookOn{what: "killed at the leadership's work deadline", fire: func() {
		signals <- syscall.SIGTERM
		testenv.Eventually(t, "the shutdown to begin", e2e.WaitTimeout, sup.shuttingDown)
	}})
	sup = newSupervisor(runConfig{candidateFlags: candidateFlags{name: "expired", key: "job", bucket: "EXPIRED"},
		argv: []string{"/bin/sh", "-c", testenv.WithMark(`trap "" TERM; sleep MARK & wait`, mark)}, grace: e2e.WaitTimeout},
		log.WithField("test", t.Name()), func() {
			ended = true
			endElection()
		})
	watching := make(chan struct{})
	defer close(watching)
	go sup.watchSignals(signals, watching)

	e, err := election.NewElection(context.Background(), "expired", "job", kv, election.WithoutSplay(), election.OnWon(sup.lead))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Start(electionCtx) }()
	// Its sleep runs once the shell ignores SIGTERM (and so does the sleep).
	testenv.AwaitSleeps(t, mark, 1, e2e.WaitTimeout)
	// The leadership ends; COMMAND ignores the SIGTERM that stops it.
	if err := kv.Delete(context.Background(), "job"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the election ended with %v", err)
		}
	case <-time.After(e2e.WaitTimeout):
		t.Fatalf("the election still runs after %v; log:\n%s", e2e.WaitTimeout, logged.String())
	}
	if !ended || sup.exitCode() != ExitOK {
		t.Errorf("the supervisor ended the election: %v, with exit code %d; want it ended with %d\n%s", ended, sup.exitCode(), ExitOK, logged.String())
	}
	wantLogged(t, logged.String(), "the command was killed at the leadership's work deadline", "shutting down")
}

// hookOn is a logrus hook that calls fire when an entry's message contains
// what.
type hookOn struct {
	what string
	fire func()
}

func (h hookOn) Levels() []logrus.Level { return logrus.AllLevels }

func (h hookOn) Fire(entry *logrus.Entry) error {
	if strings.Contains(entry.Message, h.what) {
		h.fire()
	}
	return nil
}

// TestRunStartsTheCommandAgainWhenItsGuardExpiresWhileTheLeadershipLasts
// has the guard of the first COMMAND kill it at a work deadline that the
// leadership of election run has moved past, as a guard does that did not
// see the moved deadline in time: its COMMAND is started under another
// election's leadership, which then ends. The supervisor, whose leadership
// lasts, starts COMMAND again for it at once, instead of holding the key
// with no COMMAND until the leadership ends, and does not end the election.
func TestRunStartsTheCommandAgainWhenItsGuardExpiresWhileTheLeadershipLasts(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LASTS", TTL: election.MinTTL})
	other, _, endOther := leadershipOn(t, "OTHER")
	starts, cmd := recordedStarts(t)
	var logged syncBuffer
	log := logrus.New()
	log.SetOutput(&logged)
	electionCtx, endElection := context.WithCancel(context.Background())
	defer endElection()
	var ended atomic.Bool
	sup := newSupervisor(runConfig{candidateFlags: candidateFlags{name: "a", key: "job", bucket: "LASTS"}, argv: cmd, grace: time.Second},
		log.WithField("test", t.Name()), func() {
			ended.Store(true)
			endElection()
		})
	var started atomic.Int32
	sup.start = func(leading context.Context, argv, env []string, token uint64) (*guard.Child, error) {
		if started.Add(1) == 1 {
			// The guard follows the other leadership's work deadline.
			return startGuarded(other, argv, env, token)
		}
		return startGuarded(leading, argv, env, token)
	}
	e, err := election.NewElection(context.Background(), "a", "job", kv, election.WithoutSplay(), election.OnWon(sup.lead))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Start(electionCtx) }()

	first := e2e.WaitStarts(t, starts, 1)[0]
	endOther()
	ending := time.Now()
	second := e2e.WaitStarts(t, starts, 2)[1]
	t.Logf("the command started again %v after the guard's leadership ended", time.Since(ending))
	if testenv.Alive(first.PID) {
		t.Errorf("the first command %d still runs beside the second %d", first.PID, second.PID)
	}
	if second.Token != first.Token || e.Token() != first.Token {
		t.Errorf("the command started again with token %d, the election leads with %d; want the lasting leadership's %d", second.Token, e.Token(), first.Token)
	}
	if ended.Load() {
		t.Error("the supervisor ended the election")
	}
	wantLogged(t, logged.String(), "but the leadership lasts: starting the command again")
	endElection()
	if err := <-done; err != nil {
		t.Errorf("the election ended with %v", err)
	}
	e2e.WaitDead(t, second.PID)
}
