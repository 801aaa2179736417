package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// wantRanWithin runs election check --key nightly --ran-within within in
// every format and checks each says status, with says in its text, and
// whether the last run failed.
func wantRanWithin(t *testing.T, url, within string, code int, lastFailed bool, says string) {
	t.Helper()
	status := checkStatusNames[code]
	args := []string{"check", "-s", url, "--bucket", "CRON", "--key", "nightly", "--ran-within", within}
	got, stdout, stderr := runCLI(t, args...)
	if got != code || !strings.HasPrefix(stdout, status+" KVELECT CRON ") || !strings.Contains(stdout, says) ||
		!strings.Contains(stdout, "'last_success_age:nightly'=") || stderr != "" {
		t.Errorf("nagios: exit %d, %q %q; want %d, %s saying %q", got, stdout, stderr, code, status, says)
	}
	got, stdout, _ = runCLI(t, append(args, "--format", "text")...)
	if got != code || !strings.HasPrefix(stdout, "election check CRON: "+status+"\n") || !strings.Contains(stdout, says) {
		t.Errorf("text: exit %d, %q; want %d, %s saying %q", got, stdout, code, status, says)
	}
	got, stdout, _ = runCLI(t, append(args, "--format", "json")...)
	var r checkResult
	if err := json.Unmarshal([]byte(stdout), &r); got != code || err != nil || r.Status != status || !strings.Contains(stdout, says) {
		t.Errorf("json: exit %d, %q (%v); want %d, %s saying %q", got, stdout, err, code, status, says)
	}
	got, stdout, _ = runCLI(t, append(args, "--format", "prometheus")...)
	failed := "0"
	if lastFailed {
		failed = "1"
	}
	for _, line := range []string{
		`kvelect_check_status_code{bucket="CRON"} ` + string(rune('0'+code)),
		`kvelect_check_last_run_failed{bucket="CRON",key="nightly"} ` + failed,
		`kvelect_check_last_success_timestamp_seconds{bucket="CRON",key="nightly"} `,
		`kvelect_check_ran_within_seconds{bucket="CRON",key="nightly"} `,
	} {
		if got != code || !strings.Contains(stdout, "\n"+line) {
			t.Errorf("prometheus: exit %d, no line %q in:\n%s", got, line, stdout)
		}
	}
	if code == checkCritical && !strings.Contains(stdout, `kvelect_check_last_success_timestamp_seconds{bucket="CRON",key="nightly"} 0`+"\n") {
		t.Errorf("prometheus: no success within the window, but the timestamp is not 0:\n%s", stdout)
	}
}

// TestCheckRanWithinSaysWhetherTheJobRan: before any run, and after a
// failed run alone, CRITICAL; after a success, OK; after a success and then
// a failure, WARNING; a success older than the window counts for nothing.
// In every format.
func TestCheckRanWithinSaysWhetherTheJobRan(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "CRON", TTL: 2 * time.Second})
	if _, err := history.Create(context.Background(), js, "CRON", 0); err != nil {
		t.Fatal(err)
	}
	run := func(name, job string) {
		t.Helper()
		if code, _, stderr := runCLI(t, "run", "-s", url, "--bucket", "CRON", "--key", "nightly", "--name", name, "--once", "--", "sh", "-c", job); code == ExitSkipped {
			t.Fatalf("run --once as %s skipped the job:\n%s", name, stderr)
		}
	}
	wantRanWithin(t, url, "25h", checkCritical, false, "nightly: no run recorded within 25h")
	run("host1", "exit 3")
	wantRanWithin(t, url, "25h", checkCritical, true, "nightly: no successful run within 25h; the last, by host1 at ")
	run("host2", "true")
	wantRanWithin(t, url, "25h", checkOK, false, "nightly ran by host2 at ")
	testenv.Eventually(t, "host2's done mark to age out", 10*time.Second, func() bool {
		_, err := kv.Get(context.Background(), "nightly")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	run("host3", "exit 4")
	wantRanWithin(t, url, "1d", checkWarning, true, "nightly: the last run failed: by host3 at ")
	// host2's success ended over two seconds ago.
	wantRanWithin(t, url, "2s", checkCritical, true, "nightly: no successful run within 2s; the last, by host3 at ")
}

// TestCheckRanWithinRefusesBadUse: --ran-within without a key, with a bad
// duration, or on a bucket without a history.
func TestCheckRanWithinRefusesBadUse(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "BARE", TTL: 2 * time.Second})
	for says, args := range map[string][]string{
		"--ran-within 25h without --key: give the key of the job":                        {"--fleet", "--ran-within", "25h"},
		`invalid value "25" for flag -ran-within: want a duration above 0 with its unit`: {"--key", "nightly", "--ran-within", "25"},
		`invalid value "-1h" for flag -ran-within`:                                       {"--key", "nightly", "--ran-within", "-1h"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"check", "-s", url, "--bucket", "BARE"}, args...)...)
		e2e.WantOneLineError(t, code, checkUnknown, stdout, stderr, says)
	}
	code, stdout, _ := runCLI(t, "check", "-s", url, "--bucket", "BARE", "--key", "nightly", "--ran-within", "25h")
	if code != checkUnknown || !strings.Contains(stdout, "keeps no leadership history, where runs are recorded: add one with election bucket create --bucket BARE --history 7d") {
		t.Errorf("a bucket without a history: exit %d, %q; want UNKNOWN naming the fix", code, stdout)
	}
}

// TestDeployedRulesUseCheckSeries: the job alerts of the shipped rules name
// only series election check --ran-within prints, with its labels.
func TestDeployedRulesUseCheckSeries(t *testing.T) {
	t.Parallel()
	r := &checkResult{Name: "CRON"}
	judgeRuns(r, "nightly", 25*time.Hour, nil, nil, time.Now())
	var out strings.Builder
	printCheckPrometheus(&out, r, "kvelect_check")
	rules, err := os.ReadFile("../../../../deploy/prometheus/kvelect-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`kvelect_check_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("the rules name no kvelect_check_* series")
	}
	for _, name := range used {
		if !strings.Contains(out.String(), "\n"+name+`{bucket="CRON",key="nightly"} `) {
			t.Errorf("the rules use %s, which election check --ran-within does not print with labels bucket and key:\n%s", name, out.String())
		}
	}
}
