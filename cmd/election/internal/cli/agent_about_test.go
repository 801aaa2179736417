package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
)

// TestAgentHelpGivesTheTimingsOfALostDaemon: the figures agent --help gives
// for a daemon whose node is cut off, at a 10 s TTL, are the election's:
// SIGTERM at the validity (renewal) deadline, SIGKILL at the work
// deadline, the WorkMargin (fleet.LossMargin) later, and the key's
// earliest expiry after both.
func TestAgentHelpGivesTheTimingsOfALostDaemon(t *testing.T) {
	tm := election.TimingFor(10*time.Second, 0)
	s := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	about := strings.Join(strings.Fields(agentAbout), " ")
	for _, want := range []string{
		"SIGTERM at its renewal deadline, " + s(tm.Validity) + " after its last renewal at a 10 s TTL",
		"SIGKILL at its work deadline, " + s(tm.WorkMargin()) + " later",
		"age out, " + s(tm.EarliestExpiry) + " after that renewal at the earliest",
	} {
		if !strings.Contains(about, want) {
			t.Errorf("agent's help does not say %q", want)
		}
	}
	if tm.WorkDeadline >= tm.EarliestExpiry {
		t.Errorf("the work deadline %v is not before the earliest expiry %v", tm.WorkDeadline, tm.EarliestExpiry)
	}
}
