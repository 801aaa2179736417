package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// mirrorOf creates name, a KV mirror of bucket with the given TTL (0: keys
// kept forever), on the same server.
func mirrorOf(t *testing.T, js jetstream.JetStream, name, bucket string, ttl time.Duration) {
	t.Helper()
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: name, TTL: ttl, Mirror: &jetstream.StreamSource{Name: bucket}})
}

// bucketAndMirror starts a server with bucket E (keys expiring after 2s)
// and EM, a mirror of E with the same TTL, and returns the server's URL and
// a JetStream connection to it.
func bucketAndMirror(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	mirrorOf(t, js, "EM", "E", 2*time.Second)
	return url, js
}

// mirrorLabel matches the first line of status --mirror M of bucket B.
const mirrorLabel = `^from mirror EM of bucket E: not authoritative, may be stale; lag \d+ messages, last heard from bucket E \d+(\.\d+)?[mµn]?s ago$`

func TestStatusReadsAMirrorAndSaysItIsNotAuthoritative(t *testing.T) {
	t.Parallel()
	url, js := bucketAndMirror(t)
	mirrorOf(t, js, "EF", "E", 0) // keeps keys forever: status takes E's TTL
	job := candidates(t, url, "E", "job", "node0", "node1")
	leader := waitLeader(t, job)
	waitCandidates(t, js, "E", 2)

	// The mirror catches up with the bucket within moments.
	stdout := testenv.Poll(t, "status --mirror EM to show the leader and both candidates", pollTimeout, func() (string, bool) {
		code, stdout, stderr := runCLI(t, "status", "-s", url, "--bucket", "E", "--mirror", "EM")
		if code != 0 || stderr != "" {
			t.Fatalf("status --mirror: exit %d, stderr %q", code, stderr)
		}
		return stdout, strings.Contains(stdout, " "+leader+" ") && strings.Contains(stdout, "node0,node1")
	})
	wantLines(t, stdout,
		mirrorLabel,
		`^KEY +LEADER +TOKEN +SINCE +REVISION +AGE +CANDIDATES$`,
		`^job +`+leader+` +- +- +\d+ +\d+(\.\d+)?m?s +node0,node1$`)

	code, stdout, stderr := runCLI(t, "status", "-s", url, "--bucket", "E", "--mirror", "EF", "--key", "job")
	if code != 0 || stderr != "" {
		t.Fatalf("status --mirror EF: exit %d, stderr %q", code, stderr)
	}
	if first, _, _ := strings.Cut(stdout, "\n"); !strings.HasPrefix(first, "from mirror EF of bucket E: not authoritative, may be stale; lag ") {
		t.Errorf("status --mirror EF starts with %q, want the mirror's label", first)
	}

	code, stdout, stderr = runCLI(t, "status", "-s", url, "--bucket", "E", "--mirror", "EM", "--json")
	if code != 0 || stderr != "" {
		t.Fatalf("status --mirror --json: exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("status --mirror --json printed %q, want a leader line and the mirror's", stdout)
	}
	var l struct {
		leaderJSON
		Authoritative *bool  `json:"authoritative"`
		Mirror        string `json:"mirror"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &l); err != nil || l.Key != "job" || l.Leader != leader ||
		l.Authoritative == nil || *l.Authoritative || l.Mirror != "EM" {
		t.Errorf("leader line %q (%v): want job's leader %s, \"authoritative\":false and \"mirror\":\"EM\"", lines[0], err, leader)
	}
	var m mirrorJSON
	if err := json.Unmarshal([]byte(lines[1]), &m); err != nil || m.Mirror != "EM" || m.Bucket != "E" || m.Authoritative ||
		!strings.Contains(m.Note, "not authoritative") || m.HeardSeconds == nil || *m.HeardSeconds < 0 || m.Error != "" {
		t.Errorf("last line %q (%v): want the mirror EM of E, not authoritative, with its lag", lines[1], err)
	}
	if !strings.Contains(lines[1], `"authoritative":false`) {
		t.Errorf("last line %q lacks \"authoritative\":false", lines[1])
	}
}

func TestStatusMirrorErrorsNameBothBuckets(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "F", TTL: 2 * time.Second})
	mirrorOf(t, js, "FM", "F", 2*time.Second)
	for name, tc := range map[string]struct {
		args []string
		code int
		says []string
	}{
		"not a mirror":         {[]string{"--mirror", "F"}, 1, []string{`--mirror F: bucket "F" is not a mirror; want a KV mirror of bucket "E"`}},
		"the bucket itself":    {[]string{"--mirror", "E"}, 1, []string{`bucket "E" is not a mirror`}},
		"mirror of another":    {[]string{"--mirror", "FM"}, 1, []string{`--mirror FM: bucket "FM" is a mirror of bucket "F", not of bucket "E"`}},
		"absent":               {[]string{"--mirror", "NOPE"}, 1, []string{`--mirror NOPE: bucket "NOPE" does not exist; want a KV mirror of bucket "E"`}},
		"invalid name":         {[]string{"--mirror", "a b"}, 2, []string{`"a b" for flag -mirror`, "allowed: letters, digits, - and _"}},
		"absent with --watch":  {[]string{"--mirror", "NOPE", "--key", "job", "--watch"}, 1, []string{`bucket "NOPE" does not exist`}},
		"mirror of another, F": {[]string{"--bucket", "F", "--mirror", "FM", "--key", "job", "--json"}, 0, nil},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"status", "-s", url, "--bucket", "E"}, tc.args...)
			code, stdout, stderr := runCLI(t, args...)
			if tc.code == 0 {
				if code != 0 || stderr != "" || !strings.Contains(stdout, `"mirror":"FM"`) {
					t.Errorf("%v: exit %d, stdout %q, stderr %q; want the mirror's lines", args, code, stdout, stderr)
				}
				return
			}
			e2e.WantOneLineError(t, code, tc.code, stdout, stderr, tc.says...)
		})
	}
}

func TestStatusWatchOverAMirrorShowsItsLag(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	url, _ := bucketAndMirror(t)
	elections := candidates(t, url, "E", "job", "node0", "node1")
	first := waitLeader(t, elections)

	watch := e2e.StartWatched(t, "status --watch --mirror", bin, "status", "-s", url, "--bucket", "E", "--mirror", "EM", "--key", "job", "--watch")
	if line := watch.Next(t); line != "from mirror EM of bucket E: not authoritative, may be stale" {
		t.Fatalf("first line %q, want the mirror's label", line)
	}
	if header := strings.Join(strings.Fields(watch.Next(t)), " "); header != "TIME KEY LEADER REVISION MIRROR" {
		t.Fatalf("header %q, want TIME KEY LEADER REVISION MIRROR", header)
	}
	change := regexp.MustCompile(`^\S+ +job +(\S+) +\S+ +lag \d+ messages, (last heard from bucket E \S+ ago|never heard from bucket E)$`)
	// The mirror may not have the leader yet: none first, then the leader.
	for {
		line := watch.Next(t)
		m := change.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line %q does not match %s", line, change)
		}
		if m[1] == first {
			break
		}
		if m[1] != "none" {
			t.Fatalf("line %q: want none or %s", line, first)
		}
	}
	if err := watch.Interrupt(); err != nil {
		t.Errorf("status --watch --mirror after SIGINT: %v, want exit 0; stderr %q", err, watch.Stderr())
	}
}

func TestDashboardOverAMirrorSaysItIsNotAuthoritative(t *testing.T) {
	t.Parallel()
	url, js := bucketAndMirror(t)
	leader := waitLeader(t, candidates(t, url, "E", "job", "node0"))

	ctx := context.Background()
	src, err := openObserved(ctx, js, "E", "EM")
	if err != nil {
		t.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, src.kv)
	if err != nil {
		t.Fatal(err)
	}
	d := newDashboard(b, js, "E")
	d.mirror = src.mirror
	srv := serveFollowing(t, d)

	page := testenv.Poll(t, "the dashboard over the mirror to show job's leader", pollTimeout, func() (keysPage, bool) {
		var page keysPage
		code := getJSON(t, srv.URL+"/api/keys", &page)
		return page, code == 200 && len(page.Keys) == 1 && page.Keys[0].Leader == leader
	})
	if m := page.Mirror; m == nil || m.Mirror != "EM" || m.Bucket != "E" || m.Authoritative || !strings.Contains(m.Note, "not authoritative") || m.HeardSeconds == nil {
		t.Errorf("/api/keys mirror %+v: want EM of E, not authoritative, with its lag", m)
	}
	var fp fleetPage
	if code := getJSON(t, srv.URL+"/api/fleet", &fp); code != 200 || fp.Mirror == nil || fp.Mirror.Authoritative {
		t.Errorf("/api/fleet: %d, mirror %+v; want the mirror, not authoritative", code, fp.Mirror)
	}
	var events []historyJSON
	if code := getJSON(t, srv.URL+"/api/history?key=job", &events); code != 404 {
		t.Errorf("/api/history over a mirror: %d, want 404: the history lives with the bucket", code)
	}
	// Without --mirror, no mirror field at all.
	plain := serveDashboard(t, url, "E")
	var direct map[string]json.RawMessage
	if code := getJSON(t, plain.URL+"/api/keys", &direct); code != 200 || direct["mirror"] != nil {
		t.Errorf("/api/keys without --mirror: %d, mirror %s; want none", code, direct["mirror"])
	}
}

func TestDashboardMirrorErrorsNameBothBuckets(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	code, stdout, stderr := runCLI(t, "dashboard", "-s", url, "--bucket", "E", "--mirror", "E", "--listen", "127.0.0.1:0")
	e2e.WantOneLineError(t, code, 1, stdout, stderr, `--mirror E: bucket "E" is not a mirror; want a KV mirror of bucket "E"`)
}
