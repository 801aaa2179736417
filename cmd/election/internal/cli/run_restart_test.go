//go:build linux

package cli

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/guard"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// TestRunRestartRacingTheLeadershipsEndStaysWithinTheWorkDeadline:
// run's restart of a command its guard killed while the leadership lasts
// (0bbf4ba), raced with that leadership's end: the first guard follows
// another leadership, which ends, so it kills the command; just as run
// starts it again, this leadership's renewals hang (its validity runs
// out). The command ignores SIGTERM (grace 5 s). The restarted command, if
// any, must be dead by the last work deadline the leadership had, and no
// command may start after the leadership ended.
func TestRunRestartRacingTheLeadershipsEndStaysWithinTheWorkDeadline(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "RESTART_RACE", TTL: 2 * time.Second})
	hkv := &hangKV{KeyValue: kv}
	other, _, endOther := leadershipOn(t, "RESTART_OTHER")
	starts := filepath.Join(t.TempDir(), "starts")
	killStartedCommands(t, starts)
	cmd := []string{"sh", "-c", `echo "$KVELECT_LEADER $KVELECT_TOKEN $$ $KVELECT_KEY $KVELECT_BUCKET" >> ` + starts + `; trap "" TERM; while :; do sleep 1; done`}
	var logged syncBuffer
	log := logrus.New()
	log.SetOutput(&logged)
	electionCtx, endElection := context.WithCancel(context.Background())
	defer endElection()
	sup := newSupervisor(runConfig{candidateFlags: candidateFlags{name: "a", key: "job", bucket: "RESTART_RACE"}, argv: cmd, grace: 5 * time.Second},
		log.WithField("test", t.Name()), endElection)

	var mu sync.Mutex
	var lastDeadline time.Time // the leadership's last work deadline
	var endedAt time.Time
	var calls atomic.Int32
	sup.start = func(leading context.Context, argv, env []string, token uint64) (*guard.Child, error) {
		if calls.Add(1) == 1 {
			go func() { // sample the work deadline while the leadership lasts
				for {
					d, ok := election.WorkDeadline(leading)
					if !ok {
						mu.Lock()
						endedAt = time.Now()
						mu.Unlock()
						return
					}
					mu.Lock()
					lastDeadline = d
					mu.Unlock()
					time.Sleep(time.Millisecond)
				}
			}()
			return startGuarded(other, argv, env, token)
		}
		hkv.hang.Store(true) // the leadership's renewals hang from the restart on
		return startGuarded(leading, argv, env, token)
	}
	e, err := election.NewElection(context.Background(), "a", "job", hkv, election.WithoutSplay(),
		election.WithLogger(testenv.Logger(t)), election.OnWon(sup.lead))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Start(electionCtx) }()
	t.Cleanup(func() { endElection(); <-done })

	first := e2e.WaitStarts(t, starts, 1)[0]
	time.Sleep(100 * time.Millisecond)
	endOther()
	second := e2e.WaitStarts(t, starts, 2)[1]
	var diedAt time.Time
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if !testenv.Alive(second.PID) {
			diedAt = time.Now()
			break
		}
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	last, ended := lastDeadline, endedAt
	mu.Unlock()
	data, _ := os.ReadFile(starts)
	all := e2e.ParseStarts(data)
	t.Logf("first %d, restarted %d; leadership ended %v; restarted command died %v after the leadership's last work deadline; %d starts", first.PID, second.PID,
		ended.Format("15:04:05.000"), diedAt.Sub(last), len(all))
	if diedAt.IsZero() {
		t.Fatalf("the restarted command %d still runs 10 s on", second.PID)
	}
	if late := diedAt.Sub(last); late > 20*time.Millisecond {
		t.Errorf("the restarted command died %v after the leadership's last work deadline", late)
	}
	if len(all) > 2 {
		t.Errorf("the command started %d times (%+v); want at most twice for one leadership that ended", len(all), all)
	}
}
