package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// serveDashboard serves the dashboard of bucket until the test ends.
func serveDashboard(t testing.TB, url, bucket string) *httptest.Server {
	t.Helper()
	_, js := testenv.Connect(t, url)
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	b, err := election.OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	return serveFollowing(t, newDashboard(b, js, bucket))
}

// serveFollowing serves d, following the bucket's changes, until the test
// ends; then it stops both and closes d's bucket.
func serveFollowing(t testing.TB, d *dashboard) *httptest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() { defer close(followed); d.follow(ctx) }()
	srv := httptest.NewServer(d.handler())
	t.Cleanup(func() {
		d.close()
		srv.Close()
		cancel()
		<-followed
		d.bucket.Close()
	})
	return srv
}

func getJSON(t testing.TB, url string, v any) int {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		if err := json.NewDecoder(res.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	return res.StatusCode
}

func TestDashboardListsKeysAndFollowsChanges(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DASH", TTL: 2 * time.Second})
	if _, err := history.Create(context.Background(), js, "DASH", 0); err != nil {
		t.Fatal(err)
	}
	job := candidates(t, url, "DASH", "job", "node0", "node1")
	cron := candidates(t, url, "DASH", "cron", "node2")
	first := waitLeader(t, job)
	waitLeader(t, cron)
	waitCandidates(t, js, "DASH", 3)
	srv := serveDashboard(t, url, "DASH")

	var page keysPage
	testenv.Poll(t, "both keys listed with their candidates, the leaders the dashboard found", pollTimeout, func() (keysPage, bool) {
		page = keysPage{}
		getJSON(t, srv.URL+"/api/keys", &page)
		return page, page.Total == 2 && len(page.Keys) == 2 && len(page.Keys[1].Candidates) == 2 && page.Keys[1].Since != nil
	})
	if k := page.Keys[1]; k.Key != "job" || k.Leader != first || k.Token != 0 || !k.Before || k.Revision == 0 || !k.Healthy || k.RenewedAgo == nil {
		t.Errorf("job's row %+v: want its leader %s, no token (it led before the dashboard started, and the history has no win), its latest revision, a renewal age and healthy", k, first)
	}
	var found keysPage
	if getJSON(t, srv.URL+"/api/keys?search=CR&limit=1", &found); found.Total != 1 || found.Keys[0].Key != "cron" {
		t.Errorf("search=CR: %+v, want cron alone", found)
	}
	if getJSON(t, srv.URL+"/api/keys?offset=1&limit=1", &found); found.Total != 2 || len(found.Keys) != 1 || found.Keys[0].Key != "job" {
		t.Errorf("offset=1&limit=1: %+v, want job alone of 2", found)
	}
	for _, bad := range []string{"limit=0", "limit=1001", "offset=-1", "offset=x"} {
		if code := getJSON(t, srv.URL+"/api/keys?"+bad, &found); code != http.StatusBadRequest {
			t.Errorf("/api/keys?%s: %d, want 400", bad, code)
		}
	}

	// A transfer shows on the stream of changes.
	res, err := http.Get(srv.URL + "/api/changes")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := bufio.NewReader(res.Body)
	if line, err := lines.ReadString('\n'); err != nil || !strings.HasPrefix(line, ": connected") {
		t.Fatalf("the stream of changes began with %q, %v", line, err)
	}
	to := "node0"
	if first == to {
		to = "node1"
	}
	_, admin := testenv.Connect(t, url)
	kv, _ := admin.KeyValue(context.Background(), "DASH")
	b, err := election.OpenBucket(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	won, err := b.Transfer(context.Background(), "job", to)
	if err != nil {
		t.Fatal(err)
	}
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream of changes ended: %v", err)
		}
		var c keyChange
		if data, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(data), &c) == nil && c.Key == "job" && c.Leader == to {
			t.Logf("the page heard of the transfer %v after the new leader's claim reached the server", time.Since(won.Written).Round(time.Millisecond))
			if c.Token != won.Revision {
				t.Errorf("the change says token %d, want the claim's revision %d", c.Token, won.Revision)
			}
			break
		}
	}

	getJSON(t, srv.URL+"/api/keys?search=job", &found)
	if k := found.Keys[0]; k.Leader != to || k.Token != won.Revision || k.Since == nil {
		t.Errorf("job's row after the transfer %+v: want %s with token %d and a since", k, to, won.Revision)
	}
	var history []struct{ Kind, Name string }
	if code := getJSON(t, srv.URL+"/api/history?key=job", &history); code != http.StatusOK {
		t.Fatalf("/api/history?key=job: %d", code)
	}
	if code := getJSON(t, srv.URL+"/api/history?key=a+b", &history); code != http.StatusBadRequest {
		t.Errorf("/api/history with a bad key: %d, want 400", code)
	}

	for path, says := range map[string]string{"/": "<title>kvelect dashboard</title>", "/app.js": "EventSource", "/style.css": "rect.gap"} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), says) {
			t.Errorf("GET %s: %d, does not say %q", path, res.StatusCode, says)
		}
	}
}

func TestDashboardWithoutHistorySaysHowToCreateIt(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "BARE", TTL: 2 * time.Second})
	srv := serveDashboard(t, s.ClientURL(), "BARE")
	res, err := http.Get(srv.URL + "/api/history?key=job")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "election bucket create --bucket BARE --history") {
		t.Errorf("history without a stream: %d %q, want 404 saying how to create it", res.StatusCode, body)
	}
}

func TestDashboardErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ELECTIONS", TTL: 2 * time.Second})
	for name, tc := range map[string]struct {
		args []string
		code int
		says string
	}{
		"no --listen":      {[]string{"-s", url}, ExitUsage, "--listen is required"},
		"bad --listen":     {[]string{"-s", url, "--listen", "8080"}, ExitUsage, `--listen "8080": want HOST:PORT`},
		"unknown bucket":   {[]string{"-s", url, "--listen", "127.0.0.1:0", "--bucket", "NOPE"}, ExitError, `bucket "NOPE" does not exist`},
		"port in use":      {[]string{"-s", url, "--listen", taken.Addr().String()}, ExitError, "address already in use"},
		"bad --log-format": {[]string{"-s", url, "--listen", "127.0.0.1:0", "--log-format", "xml"}, ExitUsage, `--log-format "xml": want text or json`},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"dashboard"}, tc.args...)...)
			e2e.WantOneLineError(t, code, tc.code, stdout, stderr, tc.says)
		})
	}
}

// BenchmarkDashboardKeys lists the first page of a bucket of 10,000 keys
// with leaders, as the page does at each load: ns/op is one listing.
//
//	go test ./cmd/election -run '^$' -bench DashboardKeys
func BenchmarkDashboardKeys(b *testing.B) {
	s := testenv.Server(b)
	_, js := testenv.Connect(b, s.ClientURL())
	kv := testenv.Bucket(b, js, jetstream.KeyValueConfig{Bucket: "MANY", TTL: time.Hour, Storage: jetstream.MemoryStorage})
	const keys = 10000
	for i := range keys {
		if _, err := kv.PutString(context.Background(), fmt.Sprintf("key-%05d", i), "node-1"); err != nil {
			b.Fatal(err)
		}
	}
	srv := serveDashboard(b, s.ClientURL(), "MANY")
	var page keysPage
	testenv.Poll(b, "every key listed", time.Minute, func() (int, bool) {
		getJSON(b, srv.URL+"/api/keys", &page)
		return page.Total, page.Total == keys
	})
	for b.Loop() {
		getJSON(b, srv.URL+"/api/keys?search=key-09&limit=100", &page)
	}
}

// TestDashboardShowsTheFleetAndWhatItKnowsOfTokens: the fleet's keys show
// as its nodes and daemons, not as keys; a daemon that runs nowhere says so;
// a leader that led before the dashboard started has the token and the start
// of its win in the history, and one without a recorded win the bound its
// latest write gives.
func TestDashboardShowsTheFleetAndWhatItKnowsOfTokens(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	ctx := context.Background()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "FLEETD", TTL: 2 * time.Second})
	h, err := history.Create(ctx, js, "FLEETD", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, kv, election.WithoutSplay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	recorded, err := b.NewElection("node-r", "recorded", election.WithEventHook(h.Record))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	started := make(chan struct{})
	go func() { defer close(started); recorded.Start(runCtx) }()
	t.Cleanup(func() { cancel(); <-started })
	unrecorded := candidates(t, url, "FLEETD", "unrecorded", "node-u")
	testenv.Eventually(t, "both leaders", e2e.WaitTimeout, func() bool { return recorded.IsLeader() && unrecorded["node-u"].IsLeader() })
	testenv.Poll(t, "the win recorded", e2e.WaitTimeout, func() ([]history.Event, bool) {
		evs, err := h.Events(ctx, "recorded", time.Time{})
		return evs, err == nil && len(evs) == 1
	})

	node, err := fleet.Join(ctx, b, fleet.Config{Name: "n1", Capacity: 2, Labels: map[string]string{"zone": "eu-1"}, Daemons: []fleet.Daemon{
		{Name: "relay", Run: func(ctx context.Context) error { <-ctx.Done(); return nil }},
		{Name: "flaky", Run: func(context.Context) error { return errors.New("boom") }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Leave)
	// A member, as fleet.Join records one, that never claims its daemon.
	ghost := candidatesWithMetadata(t, kv, "ghost", "fleet.node.ghost", map[string]string{"capacity": "1", "daemons": "orphan"})
	testenv.Eventually(t, "the ghost member", e2e.WaitTimeout, ghost.IsLeader)

	srv := serveDashboard(t, url, "FLEETD")
	var page keysPage
	testenv.Poll(t, "the two keys, with the recorded win's token", pollTimeout, func() (keysPage, bool) {
		page = keysPage{}
		getJSON(t, srv.URL+"/api/keys", &page)
		return page, page.Total == 2 && page.Keys[0].Token != 0
	})
	if k := page.Keys[0]; k.Key != "recorded" || k.Token != recorded.Token() || k.Since == nil || k.Before {
		t.Errorf("recorded's row %+v: want token %d and the win's time from the history", k, recorded.Token())
	}
	if k := page.Keys[1]; k.Key != "unrecorded" || k.Token != 0 || k.Revision < unrecorded["node-u"].Token() || k.Since == nil || !k.Before {
		t.Errorf("unrecorded's row %+v: want no token, its latest revision (at least %d), and since before the dashboard's start", k, unrecorded["node-u"].Token())
	}

	var fp fleetPage
	testenv.Poll(t, "the fleet: relay running, flaky restarted, orphan nowhere", pollTimeout, func() (fleetPage, bool) {
		fp = fleetPage{}
		getJSON(t, srv.URL+"/api/fleet", &fp)
		byName := map[string]fleetDaemonJSON{}
		for _, d := range fp.Daemons {
			byName[d.Daemon] = d
		}
		return fp, len(fp.Nodes) == 2 && byName["relay"].State == "running" && byName["flaky"].Restarts > 0 && byName["orphan"].Daemon != ""
	})
	for _, d := range fp.Daemons {
		switch d.Daemon {
		case "relay":
			if d.Node != "n1" || d.Token == 0 || d.Since == nil || d.Key != "fleet.daemon.relay" {
				t.Errorf("relay %+v: want running on n1 with a token, a start and its key", d)
			}
		case "flaky":
			if d.Node != "n1" || d.LastError != "boom" {
				t.Errorf("flaky %+v: want on n1 with its last error", d)
			}
		case "orphan":
			if d.Node != "" || d.State == "running" || d.State == "revoking" {
				t.Errorf("orphan %+v: want on no node", d)
			}
		}
	}
	if n := fp.Nodes[0]; n.Node != "ghost" || n.Capacity != 1 || len(n.Running) != 0 {
		t.Errorf("first node %+v: want ghost, capacity 1, running nothing", n)
	}
	if n := fp.Nodes[1]; n.Node != "n1" || n.Capacity != 2 || n.Labels["zone"] != "eu-1" || len(n.CanRun) != 2 {
		t.Errorf("second node %+v: want n1, capacity 2, zone=eu-1, two daemons it can run", n)
	}
}

// candidatesWithMetadata runs one election with metadata until the test ends.
func candidatesWithMetadata(t *testing.T, kv jetstream.KeyValue, name, key string, metadata map[string]string) *election.Election {
	t.Helper()
	e, err := election.NewElection(context.Background(), name, key, kv, election.WithoutSplay(), election.WithMetadata(metadata))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// TestDashboardLogsAsTheOtherCommands: the dashboard's log lines have the
// times of run's, sidecar's and agent's (to the millisecond), and its
// --log-format json.
func TestDashboardLogsAsTheOtherCommands(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ELECTIONS", TTL: 2 * time.Second})
	bin := e2e.BuildElection(t)
	for format, want := range map[string]*regexp.Regexp{
		"text": regexp.MustCompile(`^time="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)" level=info msg="serving the dashboard of bucket ELECTIONS" url="http://127\.0\.0\.1:\d+/"$`),
		"json": regexp.MustCompile(`^\{"level":"info","msg":"serving the dashboard of bucket ELECTIONS","time":"[^"]+","url":"http://127\.0\.0\.1:\d+/"\}$`),
	} {
		t.Run(format, func(t *testing.T) {
			cmd := exec.Command(bin, "dashboard", "-s", s.ClientURL(), "--listen", "127.0.0.1:0", "--log-format", format)
			cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "NATS_URL=", "NATS_CONTEXT=")
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cmd.Process.Signal(os.Interrupt)
				cmd.Wait()
			}()
			line, err := bufio.NewReader(stderr).ReadString('\n')
			if err != nil {
				t.Fatalf("the dashboard logged %q, then %v", line, err)
			}
			if !want.MatchString(strings.TrimSuffix(line, "\n")) {
				t.Errorf("the dashboard logged %q, want a line matching %s", line, want)
			}
		})
	}
}
