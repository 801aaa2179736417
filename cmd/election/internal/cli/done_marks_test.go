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
// ...", not as a leader; with --done-for, status --key shows the mark the
// history keeps until it ends, past the key's own.
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
	ageOut()
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
