package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStatusShowsADoneMarkNotALeader: after run --once, status, check and
// the dashboard show the key's done mark as "done by NAME at ..., until
// ...", not as a leader; with --done-for (1 h on a TTL of 2 s), status (of
// the key and of the whole bucket) and the dashboard show the mark the
// history keeps, until it ends, and keep the row after the key's own mark
// has aged out.
func TestStatusShowsADoneMarkNotALeader(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DONE", TTL: 2 * time.Second})
	if _, err := history.Create(context.Background(), js, "DONE", 0); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "run", "-s", url, "--bucket", "DONE", "--key", "nightly", "--name", "host1", "--once", "--", "true"); code != 0 {
		t.Fatalf("run --once: exit %d:\n%s", code, stderr)
	}
	e, err := kv.Get(context.Background(), "nightly")
	if err != nil {
		t.Fatal(err)
	}
	stamp := e.Created().UTC()
	untilTTL := stamp.Add(2 * time.Second).Format(time.RFC3339)

	code, stdout, stderr := runCLI(t, "status", "-s", url, "--bucket", "DONE")
	if code != 0 || !strings.Contains(stdout, "\nnightly  done by host1 at "+stamp.Format(time.RFC3339)+", until "+untilTTL+" ") {
		t.Errorf("status: exit %d, %s%s; want nightly done by host1 at %s, until %s (a TTL later)", code, stdout, stderr, stamp.Format(time.RFC3339), untilTTL)
	}
	code, stdout, _ = runCLI(t, "status", "-s", url, "--bucket", "DONE", "--key", "nightly", "--json")
	var l leaderJSON
	if err := json.Unmarshal([]byte(strings.Split(stdout, "\n")[0]), &l); code != 0 || err != nil || l.Leader != "" || l.Done == nil || l.Done.By != "host1" {
		t.Errorf("status --json: exit %d, %s (%v); want no leader and a done mark by host1", code, stdout, err)
	}
	code, stdout, _ = runCLI(t, "check", "-s", url, "--bucket", "DONE", "--key", "nightly")
	if code != checkOK || !strings.Contains(stdout, "nightly has no leader: it is a job's key, done by host1 at ") || !strings.Contains(stdout, "--ran-within") {
		t.Errorf("check: exit %d, %s; want OK saying it is a job's key, done by host1", code, stdout)
	}

	srv := serveDashboard(t, url, "DONE")
	var page keysPage
	getJSON(t, srv.URL+"/api/keys", &page)
	if len(page.Keys) != 1 || page.Keys[0].Leader != "" || page.Keys[0].Done == nil || page.Keys[0].Done.By != "host1" || !page.Keys[0].Healthy {
		t.Errorf("the dashboard's keys: %+v; want nightly with no leader, done by host1, healthy", page.Keys)
	}

	ageOut := func() {
		t.Helper()
		testenv.Eventually(t, "the key's own mark to age out", 10*time.Second, func() bool {
			_, err := kv.Get(context.Background(), "nightly")
			return err != nil
		})
	}
	ageOut()
	if code, _, stderr := runCLI(t, "run", "-s", url, "--bucket", "DONE", "--key", "nightly", "--name", "host2", "--once", "--done-for", "1h", "--", "true"); code != 0 {
		t.Fatalf("run --once --done-for 1h: exit %d:\n%s", code, stderr)
	}
	code, stdout, _ = runCLI(t, "status", "-s", url, "--bucket", "DONE")
	if code != 0 || !strings.Contains(stdout, "\nnightly  done by host2 at ") {
		t.Errorf("status after a run with --done-for: exit %d, %s; want nightly done by host2", code, stdout)
	}
	wantHourMark(t, "the dashboard while the key's own mark stands", dashboardMark(t, srv.URL))
	ageOut()
	wantHourMark(t, "the dashboard after the key's own mark aged out", dashboardMark(t, srv.URL))
	wantHourMark(t, "status --json after the key's own mark aged out", statusMark(t, url, "DONE"))
	code, stdout, _ = runCLI(t, "status", "-s", url, "--bucket", "DONE")
	if code != 0 || !strings.Contains(stdout, "\nnightly  done by host2 at ") {
		t.Errorf("status after the key's own mark aged out: exit %d, %s; want nightly done by host2, from the history", code, stdout)
	}
	code, stdout, _ = runCLI(t, "status", "-s", url, "--bucket", "DONE", "--key", "nightly", "--json")
	if err := json.Unmarshal([]byte(strings.Split(stdout, "\n")[0]), &l); code != 0 || err != nil || l.Done == nil || l.Done.By != "host2" ||
		l.Done.Until.Sub(l.Done.At) < time.Hour || l.Done.Token == 0 {
		t.Errorf("status --key --json after the key's mark aged out: %s (%v); want host2's mark of an hour from the history, with the run's token", stdout, err)
	}
	code, stdout, _ = runCLI(t, "status", "-s", url, "--bucket", "DONE", "--key", "nightly")
	if code != 0 || !strings.Contains(stdout, "\nnightly  done by host2 at ") {
		t.Errorf("status --key after the key's mark aged out: exit %d, %s; want host2's mark from the history", code, stdout)
	}
}

// dashboardMark returns the done mark the dashboard at url shows for key
// nightly, nil if it shows none (or no such row).
func dashboardMark(t *testing.T, url string) *doneMark {
	t.Helper()
	var page keysPage
	getJSON(t, url+"/api/keys", &page)
	for _, row := range page.Keys {
		if row.Key == "nightly" {
			return row.Done
		}
	}
	return nil
}

// statusMark returns the done mark election status --json shows for key
// nightly of the whole bucket, nil if it shows none (or no such row).
func statusMark(t *testing.T, url, bucket string) *doneMark {
	t.Helper()
	code, stdout, stderr := runCLI(t, "status", "-s", url, "--bucket", bucket, "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d, %s", code, stderr)
	}
	for _, line := range strings.Split(stdout, "\n") {
		var l leaderJSON
		if json.Unmarshal([]byte(line), &l) == nil && l.Key == "nightly" {
			return l.Done
		}
	}
	return nil
}

// wantHourMark fails the test unless m is host2's mark of an hour.
func wantHourMark(t *testing.T, what string, m *doneMark) {
	t.Helper()
	if m == nil || m.By != "host2" || m.Until.Sub(m.At) < time.Hour {
		t.Errorf("%s: done mark %+v; want host2's, until an hour after it ran (--done-for 1h)", what, m)
	} else {
		t.Logf("%s: %s", what, m)
	}
}
