package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/fleet"
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

// TestJSONNumbersHaveNoFloatNoise: status --json (a key's leader and a
// fleet's node) and check --format json (a key's renewal age and its
// thresholds) give their figures to the millisecond: no number has more
// than 6 decimals (such as 1.9952096259999998).
func TestJSONNumbersHaveNoFloatNoise(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "NOISE", TTL: 2 * time.Second})
	waitLeader(t, candidates(t, url, "NOISE", "job", "node0"))
	b, err := election.OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	node, err := fleet.Join(context.Background(), b, fleet.Config{Name: "n1", Daemons: []fleet.Daemon{
		{Name: "relay", Run: func(ctx context.Context) error { <-ctx.Done(); return nil }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Leave)

	code, stdout, stderr := runCLI(t, "status", "-s", url, "--bucket", "NOISE", "--json")
	if code != ExitOK || !strings.Contains(stdout, `"age_seconds":`) || !strings.Contains(stdout, `"node":"n1"`) {
		t.Fatalf("status --json: exit %d, %q %q; want the key's leader and the node, with their ages", code, stdout, stderr)
	}
	wantNoFloatNoise(t, "status --json", stdout)
	t.Logf("status --json:\n%s", stdout)
	code, stdout, _ = runCLI(t, "check", "-s", url, "--bucket", "NOISE", "--key", "job", "--format", "json")
	if code != checkOK || !strings.Contains(stdout, `"renew_age:job"`) {
		t.Fatalf("check --format json: exit %d, %q; want OK with the renewal's age", code, stdout)
	}
	wantNoFloatNoise(t, "check --format json", stdout)
	t.Logf("check --format json:\n%s", stdout)
}

// wantNoFloatNoise checks that no number of out, JSON values one after
// another, has more than 6 decimals.
func wantNoFloatNoise(t *testing.T, what, out string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var numbers int
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v in %s", what, err, out)
		}
		n, ok := tok.(json.Number)
		if !ok {
			continue
		}
		numbers++
		if d := decimals(string(n)); d > 6 {
			t.Errorf("%s: %s has %d decimals, want at most 6", what, n, d)
		}
	}
	if numbers == 0 {
		t.Errorf("%s: no number in %s", what, out)
	}
}

// decimals is how many digits a JSON number has after its point, its
// exponent counted (1.5e-07: 8).
func decimals(n string) int {
	mantissa, exp, _ := strings.Cut(strings.ToLower(n), "e")
	d := 0
	if _, frac, ok := strings.Cut(mantissa, "."); ok {
		d = len(frac)
	}
	if exp != "" {
		e, _ := strconv.Atoi(exp)
		d -= e
	}
	return max(d, 0)
}
