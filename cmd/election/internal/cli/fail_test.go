package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAnUnusableBucketIsNamedOnce: the library's "election: " shows in no
// line whose start names the command already, whether the library's error
// comes first or wrapped by another package (fleet's "invalid
// configuration: "): agent on a bucket at TTL 500 ms, check on a bucket
// without a TTL, and fail with each shape.
func TestAnUnusableBucketIsNamedOnce(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SHORT", TTL: 500 * time.Millisecond})
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "NOTTL"})

	code, stdout, stderr := runCLI(t, "agent", "-s", url, "--bucket", "SHORT", "--name", "n1", "--daemon", "d=true")
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := lines[len(lines)-1] // after the log's lines
	t.Logf("agent: exit %d: %s", code, last)
	if code != ExitError || stdout != "" || !strings.HasPrefix(last, "election agent: fleet: invalid configuration: bucket unusable") || strings.Contains(stderr, "election: ") {
		t.Errorf("agent on a bucket at TTL 500 ms: exit %d, stdout %q, stderr %q; want 1 and a line naming election once", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "check", "-s", url, "--bucket", "NOTTL", "--key", "job")
	t.Logf("check: exit %d: %s", code, stdout)
	if code != checkUnknown || !strings.HasPrefix(stdout, "UNKNOWN KVELECT NOTTL Unknown:bucket unusable") || strings.Contains(stdout, "election: ") {
		t.Errorf("check on a bucket without a TTL: exit %d, %q; want 3 and Unknown:bucket unusable…", code, stdout)
	}

	unusable := fmt.Errorf("%w: bucket TTL 0s", election.ErrBucketConfig)
	for _, err := range []error{unusable, fmt.Errorf("fleet: invalid configuration: %w", unusable)} {
		var out strings.Builder
		fail(&out, "election agent", err)
		if got := out.String(); strings.Contains(got, "election: ") || !strings.HasPrefix(got, "election agent: ") || !strings.Contains(got, "bucket unusable for elections: bucket TTL 0s") {
			t.Errorf("fail(%q) wrote %q", err, got)
		}
	}
}
