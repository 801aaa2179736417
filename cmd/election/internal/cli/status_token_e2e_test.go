//go:build linux

package cli

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
)

// TestStatusShowsTheLeadersToken runs election run on a bucket made by
// election bucket create (which has a leadership history): status shows
// the leader's fencing token, the KVELECT_TOKEN its command got, and when
// it won, in the table and in --json.
func TestStatusShowsTheLeadersToken(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t).ClientURL()
	if code, _, stderr := runCLI(t, "bucket", "create", "-s", s, "--bucket", "TOK", "--ttl", "3s"); code != 0 {
		t.Fatalf("bucket create: exit %d, %s", code, stderr)
	}
	starts, cmd := recordedStarts(t)
	e2e.StartDaemon(t, bin, "node0", "--server", s, "--bucket", "TOK", "--key", "job", "--", cmd[0], cmd[1], cmd[2])
	first := e2e.WaitStarts(t, starts, 1)[0]

	row := regexp.MustCompile(fmt.Sprintf(`(?m)^job +node0 +%d +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ +\d+ `, first.Token))
	out := pollCLI(t, "the token in status", func(stdout string) bool { return row.MatchString(stdout) },
		"status", "-s", s, "--bucket", "TOK")
	if !strings.Contains(out, "KEY  LEADER  TOKEN  SINCE") {
		t.Errorf("status header: %q", out)
	}

	out = pollCLI(t, "the token in status --json", func(stdout string) bool { return strings.Contains(stdout, `"token"`) },
		"status", "-s", s, "--bucket", "TOK", "--key", "job", "--json")
	var l leaderJSON
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &l); err != nil || l.Token != first.Token || l.Since == nil || l.Revision < l.Token {
		t.Errorf("status --json %q (%v): want token %d, since, a revision of at least the token", out, err, first.Token)
	}
}

// pollCLI runs the CLI with args until it exits 0 with an output ok accepts,
// and returns that output.
func pollCLI(t *testing.T, what string, ok func(stdout string) bool, args ...string) string {
	t.Helper()
	var out string
	testenv.Poll(t, what, pollTimeout, func() (string, bool) {
		code, stdout, stderr := runCLI(t, args...)
		out = stdout
		return fmt.Sprintf("exit %d, stdout %q, stderr %q", code, stdout, stderr), code == 0 && ok(stdout)
	})
	return out
}
