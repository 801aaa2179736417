package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
)

// TestRetentionIsPrintedAsHistoryTakesIt: bucket create prints the
// history's retention as --history takes it, 36h rather than 36h0m0s, and
// formatRetention writes each shape so.
func TestRetentionIsPrintedAsHistoryTakesIt(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	code, stdout, stderr := runCLI(t, "bucket", "create", "-s", s.ClientURL(), "--bucket", "KEPT", "--ttl", "3s", "--history", "36h")
	if code != ExitOK || !strings.Contains(stdout, "history of bucket KEPT: kept 36h\n") {
		t.Errorf("bucket create --history 36h: exit %d, %q %q; want kept 36h", code, stdout, stderr)
	}
	for d, want := range map[time.Duration]string{
		0: "0", 7 * 24 * time.Hour: "7d", 36 * time.Hour: "36h", 90 * time.Minute: "1h30m", 45 * time.Minute: "45m", 90 * time.Second: "1m30s",
	} {
		if got := formatRetention(d); got != want {
			t.Errorf("formatRetention(%v) = %q, want %q", d, got, want)
		}
	}
}
