package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
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
	d := newDashboard(b, js, bucket)
	ctx, cancel := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() { defer close(followed); d.follow(ctx) }()
	srv := httptest.NewServer(d.handler())
	t.Cleanup(func() {
		d.close()
		srv.Close()
		cancel()
		<-followed
		b.Close()
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
	testenv.Poll(t, "both keys listed with their candidates", pollTimeout, func() (keysPage, bool) {
		page = keysPage{}
		getJSON(t, srv.URL+"/api/keys", &page)
		return page, page.Total == 2 && len(page.Keys) == 2 && len(page.Keys[1].Candidates) == 2
	})
	if k := page.Keys[1]; k.Key != "job" || k.Leader != first || k.Token != 0 || !k.Healthy || k.RenewedAgo == nil {
		t.Errorf("job's row %+v: want its leader %s, no token (it led before the dashboard started), a renewal age and healthy", k, first)
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
		"no --listen":    {[]string{"-s", url}, exitUsage, "--listen is required"},
		"bad --listen":   {[]string{"-s", url, "--listen", "8080"}, exitUsage, `--listen "8080": want HOST:PORT`},
		"unknown bucket": {[]string{"-s", url, "--listen", "127.0.0.1:0", "--bucket", "NOPE"}, exitError, `bucket "NOPE" does not exist`},
		"port in use":    {[]string{"-s", url, "--listen", taken.Addr().String()}, exitError, "address already in use"},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"dashboard"}, tc.args...)...)
			wantOneLineError(t, code, tc.code, stdout, stderr, tc.says)
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
