//go:build linux

package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kvelect/election/internal/guard"
	"github.com/sirupsen/logrus"
)

// TestAgentDaemonWhoseHoldEndedBeforeItsStartIsNoCrash runs an agent's
// daemon for a hold on it that has ended already, as when the agent was
// paused between winning the daemon and starting it: the daemon does not
// start, and its Run returns nil once the hold's context is done, so the
// fleet counts no crash and starts no backoff (it restarts a daemon only
// when Run returns while the context lasts), and the agent logs why.
func TestAgentDaemonWhoseHoldEndedBeforeItsStartIsNoCrash(t *testing.T) {
	t.Parallel()
	hold, token, endHold := leadershipOn(t, "HOLD")
	endHold()
	<-hold.Done()

	ran := filepath.Join(t.TempDir(), "ran")
	d := agentDaemon{Name: "d", Command: "echo ran >> " + ran + "; sleep 1000"}
	var logged syncBuffer
	log := logrus.New()
	log.SetOutput(&logged)
	log.SetFormatter(&logrus.JSONFormatter{})
	procs := &daemonProcs{running: map[*guard.Child]bool{}, start: startGuarded}
	run := procs.run(d, agentConfig{name: "node0", bucket: "HOLD"}, time.Second, log.WithField("test", t.Name()))

	if err := run(hold); err != nil {
		t.Errorf("Run of a daemon whose hold had ended: %v, want nil (no crash)", err)
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Errorf("the daemon ran for a hold that had ended (%v)", err)
	}
	if len(procs.running) != 0 {
		t.Errorf("%d daemons left running", len(procs.running))
	}
	wantLogged(t, logged.String(), "the hold on the daemon ended before the daemon could start", `"token":`+strconv.FormatUint(token, 10))
}

// TestAgentDaemonWhoseGuardReportedNothingWhileTheHoldLastsIsACrash has the
// daemon's start fail as a guard stopped before it started anything does
// (Start kills it at the work deadline and says the leadership ended)
// while the node's hold on the daemon lasts: Run returns that error at once,
// so the fleet starts the daemon again after its backoff, instead of
// keeping a hold with nothing running until the hold ends.
func TestAgentDaemonWhoseGuardReportedNothingWhileTheHoldLastsIsACrash(t *testing.T) {
	t.Parallel()
	hold, _, endHold := leadershipOn(t, "HOLD")
	unreported := fmt.Errorf("%w: the guard reported nothing until the leadership's work deadline (was it or this process stopped?): killed it", guard.ErrLeadershipEnded)
	procs := &daemonProcs{running: map[*guard.Child]bool{}, start: func(context.Context, []string, []string, uint64) (*guard.Child, error) {
		return nil, unreported
	}}
	log := logrus.New()
	log.SetOutput(&syncBuffer{})
	run := procs.run(agentDaemon{Name: "d", Command: "true"}, agentConfig{name: "node0", bucket: "HOLD"}, time.Second, log.WithField("test", t.Name()))

	returned := make(chan error, 1)
	go func() { returned <- run(hold) }()
	select {
	case err := <-returned:
		if !errors.Is(err, guard.ErrLeadershipEnded) {
			t.Errorf("Run returned %v, want the guard's error", err)
		}
		returned <- nil // for the wait below
	case <-hold.Done():
		t.Error("Run kept the hold with nothing running until the hold ended")
	case <-time.After(10 * time.Second):
		t.Error("Run did not return within 10 s while the hold lasted")
	}
	endHold()
	select {
	case <-returned: // Run, if it waited for the hold's end, has returned
	case <-time.After(10 * time.Second):
		t.Error("Run did not return within 10 s of the hold's end")
	}
}
