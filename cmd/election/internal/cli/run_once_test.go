package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRunOnceRefusesBadDoneForAndRetryFlags: each bad use of --done-for
// and --no-retry exits 2 with one line naming what is wrong and what is
// allowed, before anything connects.
func TestRunOnceRefusesBadDoneForAndRetryFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		says []string
	}{
		{[]string{"--once", "--done-for", "-1s"}, []string{`invalid value "-1s" for flag -done-for`, "above 0", "such as 90m, 25h or 1d"}},
		{[]string{"--once", "--done-for", "10"}, []string{`invalid value "10" for flag -done-for`, "with its unit"}},
		{[]string{"--once", "--done-for", "0"}, []string{`invalid value "0" for flag -done-for`, "above 0"}},
		{[]string{"--done-for", "1h"}, []string{"--done-for is for --once"}},
		{[]string{"--no-retry"}, []string{"--no-retry is for --once"}},
		{[]string{"--once", "--done-for", "1h", "--history=false"}, []string{"--done-for with --history=false", "drop --history=false"}},
	} {
		code, stdout, stderr := runCLI(t, append(append([]string{"run", "--key", "nightly"}, tc.args...), "--", "true")...)
		e2e.WantOneLineError(t, code, ExitUsage, stdout, stderr, tc.says...)
	}
	for value, want := range map[string]time.Duration{"90m": 90 * time.Minute, "25h": 25 * time.Hour, "1d": 24 * time.Hour, "1d12h": 36 * time.Hour} {
		if got, err := parseSpan(value); err != nil || got != want {
			t.Errorf("parseSpan(%q) = %v, %v; want %v", value, got, err, want)
		}
	}
}

// TestRunOnceDoneForNeedsTheHistory: --done-for on a bucket without a
// leadership history exits 1 without running the job, naming the command
// that adds one.
func TestRunOnceDoneForNeedsTheHistory(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "BARE", TTL: 2 * time.Second})
	code, stdout, stderr := runCLI(t, "run", "-s", s.ClientURL(), "--bucket", "BARE", "--key", "nightly", "--once", "--done-for", "1h", "--", "false")
	if code != ExitError || stdout != "" {
		t.Errorf("exit %d, stdout %q; want %d and nothing", code, stdout, ExitError)
	}
	for _, says := range []string{"--done-for 1h needs the bucket's leadership history", "election bucket create --bucket BARE --history 7d"} {
		if !strings.Contains(stderr, says) {
			t.Errorf("stderr does not say %q:\n%s", says, stderr)
		}
	}
}
