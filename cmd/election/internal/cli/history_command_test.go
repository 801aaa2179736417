package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

func TestHistoryRecordsRunAndPrintsIt(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})

	code, stdout, stderr := runCLI(t, "history", "-s", url, "--bucket", "E")
	e2e.WantOneLineError(t, code, ExitError, stdout, stderr, "no leadership history", "election bucket create --bucket E --history 7d")
	if strings.Contains(stderr, "history.Create") {
		t.Errorf("the error points a command's user at the Go API: %s", stderr)
	}
	// A bucket without a history: run says so once, and runs.
	code, stdout, stderr = runCLI(t, "run", "-s", url, "--bucket", "E", "--key", "job", "--once", "--", "true")
	if code != 0 || strings.Count(stderr, "keeps no leadership history") != 1 || strings.Contains(stderr, "level=warn") {
		t.Fatalf("run on a bucket without a history: exit %d, %s%s; want 0 and one info line", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI(t, "bucket", "create", "-s", url, "--bucket", "E", "--history", "7d")
	if code != 0 || !strings.Contains(stdout, "history of bucket E: kept 7d\n") {
		t.Fatalf("bucket create --history 7d: exit %d, %s%s", code, stdout, stderr)
	}
	for range 2 {
		if code, _, stderr := runCLI(t, "run", "-s", url, "--bucket", "E", "--key", "job", "--name", "host-a", "--", "true"); code != 0 {
			t.Fatalf("run: exit %d:\n%s", code, stderr)
		}
	}

	code, stdout, stderr = runCLI(t, "history", "-s", url, "--bucket", "E", "--key", "job")
	if code != 0 {
		t.Fatalf("history: exit %d, %s", code, stderr)
	}
	wantLines(t, stdout,
		`^TIME +KEY +EVENT +NAME +TOKEN +DETAIL$`,
		`^\S+ \S+ +job +won +host-a +\d+ +no key$`,
		`^\S+ \S+ +job +stood down +host-a +\d+ +stopped$`,
		`^\S+ \S+ +job +won +host-a +\d+ +released by host-a$`,
		`^\S+ \S+ +job +stood down +host-a +\d+ +stopped$`)

	code, stdout, _ = runCLI(t, "history", "-s", url, "--bucket", "E", "--json", "--since", "1h")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var first struct {
		Key, Name, Kind, After string
		Token                  uint64
		At                     time.Time
	}
	if code != 0 || len(lines) != 4 || json.Unmarshal([]byte(lines[0]), &first) != nil ||
		first.Key != "job" || first.Kind != "won" || first.After != "no key" || first.Token == 0 || first.At.IsZero() {
		t.Errorf("history --json: exit %d, %q; want 4 lines, the first a win after no key", code, stdout)
	}

	for says, args := range map[string][]string{
		`--since -1s: want a duration of 0`:   {"history", "--since", "-1s"},
		"want a duration of a minute or more": {"bucket", "create", "--history", "30s"},
		`invalid argument: key "a b"`:         {"history", "--key", "a b"},
	} {
		code, stdout, stderr := runCLI(t, append(args, "-s", url)...)
		e2e.WantOneLineError(t, code, ExitUsage, stdout, stderr, says)
	}
}
