package cli

import (
	"strings"
	"testing"
)

func TestAgentHelpDescribesHealthCommands(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, "agent", "--help")
	if code != 0 || stderr != "" {
		t.Fatalf("agent --help: exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	for _, s := range []string{"--health-cmd NAME=COMMAND", "health_cmd:", "health_interval:", "health_failures:",
		"stops offering it after --health-failures", "runs nowhere"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("agent --help does not say %q:\n%s", s, stdout)
		}
	}
}
