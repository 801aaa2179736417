package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/kvelect/election/sidecar"
	"github.com/nats-io/nats.go/jetstream"
)

// eventLatency bounds how long a change of leader may take to reach an
// /events stream.
const eventLatency = time.Second

// syncBuffer is a buffer that one goroutine writes while another reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// sidecarInstance is an election sidecar running in this process, as the
// command's main runs it, until its context is cancelled.
type sidecarInstance struct {
	name, base, leaderFile string
	stop                   context.CancelFunc
	done                   chan int // receives the exit code
	log                    *syncBuffer
}

// startSidecar runs election sidecar as name for key in bucket, listening
// on a free loopback port, with a leader file of its own, until the test
// ends or stopSidecar.
func startSidecar(t *testing.T, url, bucket, key, name string) *sidecarInstance {
	t.Helper()
	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sc := &sidecarInstance{
		name: name, base: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		leaderFile: filepath.Join(t.TempDir(), "leader"),
		stop:       cancel, done: make(chan int, 1), log: &syncBuffer{},
	}
	args := []string{"-s", url, "--bucket", bucket, "--key", key, "--name", name, "--log-format", "json",
		"--listen", strings.TrimPrefix(sc.base, "http://"), "--leader-file", sc.leaderFile}
	_, run := sidecarCommandContext()
	go func() { sc.done <- run(ctx, args, io.Discard, sc.log) }()
	t.Cleanup(func() {
		cancel()
		<-sc.done
	})
	return sc
}

// wait waits for the sidecar to exit and returns its exit code.
func (sc *sidecarInstance) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-sc.done:
		sc.done <- code // for the cleanup
		return code
	case <-time.After(pollTimeout):
		t.Fatalf("sidecar %s still runs %v after it was stopped; log:\n%s", sc.name, pollTimeout, sc.log)
		return 0
	}
}

// self returns the status of /self and the leadership it answered.
func (sc *sidecarInstance) self() (int, sidecar.Leadership, error) {
	var v sidecar.Leadership
	code, body, err := e2e.Get(sc.base + "/self")
	if err == nil {
		err = json.Unmarshal([]byte(body), &v)
	}
	return code, v, err
}

// leaderFileHolds returns what the sidecar's leader file holds, or "" if
// there is none.
func (sc *sidecarInstance) leaderFileHolds(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(sc.leaderFile)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// waitSidecarLeader waits until exactly one of sidecars answers 200 on
// /self, and every other 503, and returns the leader.
func waitSidecarLeader(t *testing.T, sidecars ...*sidecarInstance) *sidecarInstance {
	t.Helper()
	return testenv.Poll(t, "one sidecar answering 200 on /self and the others 503", pollTimeout, func() (*sidecarInstance, bool) {
		var leader *sidecarInstance
		for _, sc := range sidecars {
			code, v, err := sc.self()
			switch {
			case err != nil:
				return nil, false
			case code == http.StatusOK && v.IsLeader && leader == nil:
				leader = sc
			case code != http.StatusServiceUnavailable || v.IsLeader:
				return nil, false
			}
		}
		return leader, leader != nil
	})
}

// eventStream is an /events stream, read into decoded events.
type eventStream struct {
	events chan sidecar.Leadership
	body   io.ReadCloser
}

// openEvents opens the /events stream of sc until the test ends.
func openEvents(t *testing.T, sc *sidecarInstance) *eventStream {
	t.Helper()
	client := http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := client.Get(sc.base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusOK || ct != "text/event-stream" {
		res.Body.Close()
		t.Fatalf("/events: %d %s, want 200 text/event-stream", res.StatusCode, ct)
	}
	s := &eventStream{events: make(chan sidecar.Leadership, 100), body: res.Body}
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(s.events)
		lines := bufio.NewScanner(res.Body)
		for lines.Scan() {
			data, ok := strings.CutPrefix(lines.Text(), "data: ")
			if !ok {
				continue
			}
			var v sidecar.Leadership
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Errorf("/events sent %q: %v", data, err)
				return
			}
			s.events <- v
		}
	}()
	t.Cleanup(func() {
		res.Body.Close()
		<-read
	})
	return s
}

// next returns the next event that satisfies match, failing the test if
// none arrives by deadline.
func (s *eventStream) next(t *testing.T, what string, deadline time.Time, match func(sidecar.Leadership) bool) sidecar.Leadership {
	t.Helper()
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for {
		select {
		case v, ok := <-s.events:
			if !ok {
				t.Fatalf("the event stream ended before %s", what)
			}
			if match(v) {
				return v
			}
		case <-timeout.C:
			t.Fatalf("no event of %s by the deadline", what)
		}
	}
}

// end waits for the stream to end, as it does when its sidecar stops.
func (s *eventStream) end(t *testing.T) {
	t.Helper()
	timeout := time.NewTimer(pollTimeout)
	defer timeout.Stop()
	for {
		select {
		case _, ok := <-s.events:
			if !ok {
				return
			}
		case <-timeout.C:
			t.Fatalf("the event stream still runs %v after its sidecar stopped", pollTimeout)
		}
	}
}

// led returns a match for an event naming name as the leader.
func led(name string) func(sidecar.Leadership) bool {
	return func(v sidecar.Leadership) bool { return v.Name == name }
}

// transferTo runs election transfer of key in bucket to name until it
// succeeds, and returns the revision of name's claim that it printed. A
// candidate claims a handoff only once its start-up splay is over, which
// nothing outside it shows: a transfer that finds it still waiting fails,
// and is made again.
func transferTo(t *testing.T, url, bucket, key, name string) uint64 {
	t.Helper()
	out := testenv.Poll(t, "a transfer to "+name, pollTimeout, func() (string, bool) {
		code, out, errOut := runCLI(t, "transfer", "-s", url, "--bucket", bucket, "--key", key, "--to", name)
		if code != 0 && !strings.Contains(errOut, "not handed over as asked") {
			t.Fatalf("transfer: exit %d, %s%s", code, out, errOut)
		}
		return out + errOut, code == 0
	})
	var leader, leads, k string
	var revision uint64
	if _, err := fmt.Sscanf(out, "%s %s %s (revision %d)", &leader, &leads, &k, &revision); err != nil || leader != name {
		t.Fatalf("transfer printed %q (%v), want %s and the revision of its claim", out, err, name)
	}
	return revision
}

// TestSidecarsAgreeOnTheLeaderAndHandOver runs two sidecars on one key:
// one answers 200 on /self and keeps the leader file, the other 503 and
// none; both name the same leader on / and /leader. A transfer, then the
// leader's stop, reach both event streams within a second, and the leader
// file follows the leadership.
func TestSidecarsAgreeOnTheLeaderAndHandOver(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SIDE", TTL: 2 * time.Second})
	a := startSidecar(t, url, "SIDE", "job", "pod-a")
	b := startSidecar(t, url, "SIDE", "job", "pod-b")

	leader := waitSidecarLeader(t, a, b)
	follower := map[*sidecarInstance]*sidecarInstance{a: b, b: a}[leader]
	_, own, _ := leader.self()
	if own.Name != leader.name || own.Self != leader.name || own.Token == nil || *own.Token == 0 || own.Since == nil || own.Renewed == nil {
		t.Fatalf("the leader's /self: %+v, want its own name, a token, a since and a renewal", own)
	}
	if got, want := leader.leaderFileHolds(t), fmt.Sprintf("%d\n", *own.Token); got != want {
		t.Errorf("the leader's leader file holds %q, want its token %q", got, want)
	}
	if got := follower.leaderFileHolds(t); got != "" {
		t.Errorf("the follower has a leader file holding %q", got)
	}
	for _, sc := range []*sidecarInstance{a, b} {
		// The follower may not have seen the claim yet.
		testenv.Poll(t, sc.name+"'s / and /leader to name "+leader.name, pollTimeout, func() (string, bool) {
			_, name, _ := e2e.Get(sc.base + "/")
			_, body, _ := e2e.Get(sc.base + "/leader")
			var v sidecar.Leadership
			json.Unmarshal([]byte(body), &v)
			return name + " " + body, name == `{"name":"`+leader.name+`"}`+"\n" && v.Name == leader.name && v.IsLeader == (sc == leader) && v.Self == sc.name
		})
	}

	streams := map[*sidecarInstance]*eventStream{a: openEvents(t, a), b: openEvents(t, b)}
	for sc, stream := range streams {
		if first := stream.next(t, "the current state", time.Now().Add(pollTimeout), func(sidecar.Leadership) bool { return true }); first.Name != leader.name || first.IsLeader != (sc == leader) {
			t.Errorf("%s's first event %+v: want the current state, %s leading", sc.name, first, leader.name)
		}
	}

	// Transfer the key to the follower.
	wantToken := transferTo(t, url, "SIDE", "job", follower.name)
	transferred := time.Now()
	deadline := transferred.Add(eventLatency)
	won := streams[follower].next(t, "the follower leading after the transfer", deadline, led(follower.name))
	if !won.IsLeader || won.Token == nil || *won.Token != wantToken {
		t.Errorf("the new leader's event %+v: want is_leader and the token %d that transfer printed", won, wantToken)
	}
	seen := streams[leader].next(t, "the transfer on the old leader's stream", deadline, led(follower.name))
	t.Logf("both streams had the transfer %v after transfer returned", time.Since(transferred).Round(time.Millisecond))
	if seen.IsLeader || seen.Token == nil || *seen.Token != wantToken {
		t.Errorf("the old leader's event %+v: want the new leader with the token %d of its claim", seen, wantToken)
	}
	if got := leader.leaderFileHolds(t); got != "" {
		t.Errorf("the old leader's file still holds %q after the transfer", got)
	}
	if next := waitSidecarLeader(t, a, b); next != follower {
		t.Fatalf("/self: %s leads after the transfer to %s", next.name, follower.name)
	}
	if got, want := follower.leaderFileHolds(t), fmt.Sprintf("%d\n", wantToken); got != want {
		t.Errorf("the new leader's file holds %q, want %q", got, want)
	}

	// Stop the new leader as a signal would: the other leads within a
	// second, and by the time it does the stopped one's file is gone.
	follower.stop()
	stoppedAt := time.Now()
	back := streams[leader].next(t, "the first leader leading again after the other stopped", stoppedAt.Add(eventLatency), led(leader.name))
	t.Logf("the other sidecar's stream had it leading %v after the leader was stopped", time.Since(stoppedAt).Round(time.Millisecond))
	if !back.IsLeader || back.Token == nil || *back.Token <= wantToken {
		t.Errorf("event %+v: want is_leader with a token above %d", back, wantToken)
	}
	if got := follower.leaderFileHolds(t); got != "" {
		t.Errorf("the stopped leader's file still holds %q when the next leader leads", got)
	}
	if code := follower.wait(t); code != ExitOK {
		t.Errorf("the stopped sidecar exited %d, want 0; log:\n%s", code, follower.log)
	}
	streams[follower].end(t)
	wantLogged(t, follower.log.String(), "leading: /self answers 200", "leadership ended", "released the key")
}

// TestSidecarServesHealthApartFromLeadership checks /healthz on a leader
// and a follower: both healthy, whoever leads; and that unknown paths are
// not taken for /.
func TestSidecarServesHealthApartFromLeadership(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SIDE", TTL: 2 * time.Second})
	a := startSidecar(t, url, "SIDE", "job", "pod-a")
	b := startSidecar(t, url, "SIDE", "job", "pod-b")
	waitSidecarLeader(t, a, b)
	for _, sc := range []*sidecarInstance{a, b} {
		// Healthy once its watcher has read the key, which may come a
		// moment after another sidecar led.
		testenv.Eventually(t, sc.name+"'s /healthz to turn healthy", 10*time.Second, func() bool {
			code, _, _ := e2e.Get(sc.base + "/healthz")
			return code == http.StatusOK
		})
		code, body, err := e2e.Get(sc.base + "/healthz")
		var h sidecar.Health
		if err == nil {
			err = json.Unmarshal([]byte(body), &h)
		}
		if err != nil || code != http.StatusOK || !h.OK || !h.Connected || !h.Campaigning || !h.Watching || h.Problem != "" {
			t.Errorf("%s's /healthz: %d %q %v, want 200 and healthy", sc.name, code, body, err)
		}
		if code, _, _ := e2e.Get(sc.base + "/nope"); code != http.StatusNotFound {
			t.Errorf("%s's /nope: %d, want 404", sc.name, code)
		}
	}
}

// TestSidecarErrorsAreOneLine checks that bad flags, a taken port, an
// unusable leader-file directory, a missing bucket and an unreachable server
// each end the sidecar at once with one line naming the problem.
func TestSidecarErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SIDE", TTL: 2 * time.Second})
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	free := "127.0.0.1:0"
	cases := map[string]struct {
		args []string
		code int
		says []string
	}{
		"no key":                {[]string{"-s", url, "--bucket", "SIDE", "--listen", free}, ExitUsage, []string{"--key is required"}},
		"listen without a port": {[]string{"-s", url, "--bucket", "SIDE", "--key", "k", "--listen", "4040"}, ExitUsage, []string{`--listen "4040": want HOST:PORT, such as 127.0.0.1:4040`}},
		"listen empty":          {[]string{"-s", url, "--bucket", "SIDE", "--key", "k", "--listen", ""}, ExitUsage, []string{`--listen "": want HOST:PORT`}},
		"a command":             {[]string{"-s", url, "--bucket", "SIDE", "--key", "k", "--", "./app"}, ExitUsage, []string{`unexpected argument "./app": the sidecar runs no command`}},
		"leader-file in no directory": {[]string{"-s", url, "--bucket", "SIDE", "--key", "k", "--listen", free, "--leader-file", filepath.Join(dir, "nope", "leader")}, ExitUsage,
			[]string{"--leader-file", `nope": no such file or directory`}},
		"leader-file under a file": {[]string{"-s", url, "--bucket", "SIDE", "--key", "k", "--listen", free, "--leader-file", filepath.Join(notDir, "leader")}, ExitUsage,
			[]string{"--leader-file", "is not a directory"}},
		"port in use":        {[]string{"-s", url, "--bucket", "SIDE", "--key", "k", "--listen", taken.Addr().String()}, ExitError, []string{"--listen: listen tcp " + taken.Addr().String(), "address already in use"}},
		"metrics port taken": {[]string{"-s", url, "--bucket", "SIDE", "--key", "k", "--listen", free, "--metrics", taken.Addr().String()}, ExitError, []string{"--metrics: listen tcp", "address already in use"}},
		"missing bucket":     {[]string{"-s", url, "--key", "k", "--listen", free}, ExitError, []string{`bucket "ELECTIONS" does not exist`}},
		"unreachable server": {[]string{"-s", "nats://127.0.0.1:1", "--key", "k", "--listen", free}, ExitError, []string{"connecting to nats://127.0.0.1:1"}},
	}
	if os.Geteuid() != 0 { // root writes in a read-only directory
		readOnly := t.TempDir()
		if err := os.Chmod(readOnly, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(readOnly, 0o755) })
		cases["leader-file in a read-only directory"] = struct {
			args []string
			code int
			says []string
		}{[]string{"-s", url, "--bucket", "SIDE", "--key", "k", "--listen", free, "--leader-file", filepath.Join(readOnly, "leader")}, ExitUsage,
			[]string{"--leader-file", "cannot create files in", "permission denied"}}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"sidecar"}, tc.args...)...)
			e2e.WantOneLineError(t, code, tc.code, stdout, stderr, tc.says...)
		})
	}
}
