package cli

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

func TestStatusPrintsLeadersAndWatchers(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	job := candidates(t, url, "E", "job", "node0", "node1")
	cron := candidates(t, url, "E", "cron", "node2")
	jobLeader, cronLeader := waitLeader(t, job), waitLeader(t, cron)
	waitWatchers(t, js, "E", 3)
	waitCandidates(t, js, "E", 3)

	stdout := statusCounting(t, 3, "status", "-s", url, "--bucket", "E")
	wantLines(t, stdout,
		`^KEY +LEADER +TOKEN +SINCE +REVISION +AGE +CANDIDATES$`,
		`^cron +`+cronLeader+` +- +- +\d+ +\d+(\.\d+)?m?s +node2$`,
		`^job +`+jobLeader+` +- +- +\d+ +\d+(\.\d+)?m?s +node0,node1$`,
		`^watchers \(processes\): 3$`)

	stdout = statusCounting(t, 3, "status", "-s", url, "--bucket", "E", "--key", "free")
	wantLines(t, stdout, `^KEY +LEADER +TOKEN +SINCE +REVISION +AGE +CANDIDATES$`, `^free +none +- +- +- +- +-$`, `^watchers \(processes\): 3$`)

	stdout = statusCounting(t, 3, "status", "-s", url, "--bucket", "E", "--key", "job", "--json")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("--json printed %q, want two lines", stdout)
	}
	var l leaderJSON
	if err := json.Unmarshal([]byte(lines[0]), &l); err != nil || l.Key != "job" || l.Leader != jobLeader ||
		l.Revision == 0 || l.Written == nil || l.AgeSeconds == nil || *l.AgeSeconds < 0 || *l.AgeSeconds > 60 ||
		!slices.Equal(l.Candidates, []string{"node0", "node1"}) {
		t.Errorf("--json leader line %q (%v): want key job, leader %s, a revision, written, age and candidates node0, node1", lines[0], err, jobLeader)
	}
	if lines[1] != `{"bucket":"E","watchers":3}` {
		t.Errorf("--json last line %q, want the watcher count 3", lines[1])
	}
}

// statusCounting runs the CLI with args, a status command, until it counts
// watchers watchers, and returns its output. The count is a snapshot: a
// watcher the NATS client recreated deletes its old consumer without waiting.
func statusCounting(t *testing.T, watchers int, args ...string) string {
	t.Helper()
	return testenv.Poll(t, fmt.Sprintf("%v to count %d watchers", args, watchers), pollTimeout, func() (string, bool) {
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 || stderr != "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
		}
		return stdout, strings.Contains(stdout, fmt.Sprintf("watchers (processes): %d\n", watchers)) ||
			strings.Contains(stdout, fmt.Sprintf(`"watchers":%d}`, watchers))
	})
}

// wantLines checks that out has one line per pattern, each matching it.
func wantLines(t *testing.T, out string, patterns ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(patterns) {
		t.Fatalf("output has %d lines, want %d:\n%s", len(lines), len(patterns), out)
	}
	for i, p := range patterns {
		if !regexp.MustCompile(p).MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %s", i+1, lines[i], p)
		}
	}
}

func TestStatusErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	for name, tc := range map[string]struct {
		args []string
		code int
		says []string
	}{
		"watch without key":     {[]string{"-s", url, "--watch"}, 2, []string{"--watch needs --key"}},
		"invalid key":           {[]string{"-s", url, "--key", "a b"}, 2, []string{`invalid argument: key "a b"`}},
		"extra argument":        {[]string{"-s", url, "job"}, 2, []string{`unexpected argument "job"`}},
		"missing bucket":        {[]string{"-s", url, "--bucket", "NOPE"}, 1, []string{`bucket "NOPE" does not exist`}},
		"unreachable server":    {[]string{"-s", "nats://127.0.0.1:1"}, 1, []string{"connecting to nats://127.0.0.1:1"}},
		"metrics without watch": {[]string{"-s", url, "--key", "job", "--metrics", ":0"}, 2, []string{"--metrics is for --watch"}},
		"metrics without port":  {[]string{"-s", url, "--key", "job", "--watch", "--metrics", "localhost"}, 2, []string{`--metrics "localhost": want HOST:PORT`}},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"status"}, tc.args...)...)
			e2e.WantOneLineError(t, code, tc.code, stdout, stderr, tc.says...)
		})
	}
}
