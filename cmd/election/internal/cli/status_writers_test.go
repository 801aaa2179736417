package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStatusNamesEachCandidatesProcess lists a candidate of this kvelect
// and one whose record, as an older kvelect writes it, does not name its
// process: --json gives the first's process under "candidate_writers",
// and both outputs warn that the second's name is not checked, so that a
// second live candidate of that name, which would write the same record,
// is not silently shown as one. The clock rate a record carries is under
// "candidate_clock_rates".
func TestStatusNamesEachCandidatesProcess(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 30 * time.Second})
	job := candidates(t, url, "E", "job", "node0")
	waitLeader(t, job)
	legacy := `{"name":"legacy","priority":1,"since":"2026-01-01T00:00:00Z","clock_rate":0.97}`
	if _, err := kv.Put(context.Background(), "_kvelect.candidate.job."+base64.RawURLEncoding.EncodeToString([]byte("legacy")), []byte(legacy)); err != nil {
		t.Fatal(err)
	}
	waitCandidates(t, js, "E", 2)
	warning := "key job: legacy runs a kvelect whose candidate record does not name its process: a second live candidate named legacy would not be refused, and would show here as one"

	stdout := statusCounting(t, 1, "status", "-s", url, "--bucket", "E", "--key", "job", "--json")
	var l leaderJSON
	if err := json.Unmarshal([]byte(strings.SplitN(stdout, "\n", 2)[0]), &l); err != nil {
		t.Fatalf("--json printed %q: %v", stdout, err)
	}
	host, _ := os.Hostname()
	if w := l.Writers["node0"]; !strings.HasPrefix(w, fmt.Sprintf("%s pid %d (", host, os.Getpid())) || len(l.Writers) != 1 {
		t.Errorf("--json candidate_writers %v: want node0's process (%s pid %d) alone", l.Writers, host, os.Getpid())
	}
	if len(l.ClockRates) != 1 || l.ClockRates["legacy"] != 0.97 {
		t.Errorf("--json candidate_clock_rates %v, want legacy's 0.97 alone (node0 has not measured one within a TTL of 30 s)", l.ClockRates)
	}
	if len(l.Warnings) != 1 || l.Warnings[0] != warning {
		t.Errorf("--json warnings %q, want %q", l.Warnings, warning)
	}

	stdout = statusCounting(t, 1, "status", "-s", url, "--bucket", "E", "--key", "job")
	wantLines(t, stdout,
		`^KEY +LEADER +TOKEN +SINCE +REVISION +AGE +CANDIDATES$`,
		`^job +node0 +- +- +\d+ +\d+(\.\d+)?m?s +legacy,node0$`,
		`^warning: `+warning+`$`,
		`^watchers \(processes\): 1$`)
}

// TestStatusWarnsOfFailingHealthChecks lists a candidate whose record says
// its health check fails: --json gives why under "candidate_unhealthy",
// and both outputs warn that it claims nothing.
func TestStatusWarnsOfFailingHealthChecks(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 30 * time.Second})
	job := candidates(t, url, "E", "job", "node0")
	waitLeader(t, job)
	sick := `{"name":"sick","priority":1,"since":"2026-01-01T00:00:00Z","writer":{"instance":"0123456789ab"},"unhealthy":"3 failed checks in a row: db down"}`
	if _, err := kv.Put(context.Background(), "_kvelect.candidate.job."+base64.RawURLEncoding.EncodeToString([]byte("sick")), []byte(sick)); err != nil {
		t.Fatal(err)
	}
	waitCandidates(t, js, "E", 2)
	warning := "key job: sick claims nothing while its health check fails: 3 failed checks in a row: db down"

	stdout := statusCounting(t, 1, "status", "-s", url, "--bucket", "E", "--key", "job", "--json")
	var l leaderJSON
	if err := json.Unmarshal([]byte(strings.SplitN(stdout, "\n", 2)[0]), &l); err != nil {
		t.Fatalf("--json printed %q: %v", stdout, err)
	}
	if len(l.Unhealthy) != 1 || l.Unhealthy["sick"] != "3 failed checks in a row: db down" {
		t.Errorf("--json candidate_unhealthy %v, want sick's reason alone", l.Unhealthy)
	}
	if len(l.Warnings) != 1 || l.Warnings[0] != warning {
		t.Errorf("--json warnings %q, want %q", l.Warnings, warning)
	}
	stdout = statusCounting(t, 1, "status", "-s", url, "--bucket", "E", "--key", "job")
	if !strings.Contains(stdout, "\nwarning: "+warning+"\n") {
		t.Errorf("status printed %q, want the warning %q", stdout, warning)
	}
}
