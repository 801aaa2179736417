//go:build linux

package cli

import (
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
	procs := &daemonProcs{running: map[*guard.Child]bool{}}
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
