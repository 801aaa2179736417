//go:build linux

package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// servedSubject is the subject the endpoint tests serve.
const servedSubject = "svc.report"

// requestOutcome is what one request of servedRequests got.
type requestOutcome struct {
	replies      []*nats.Msg // replies, however many came
	noResponders bool        // the server said nobody serves
}

// servedRequests sends requests to servedSubject one after another, each
// with a reply subject of its own, so that every reply is counted against
// its request, however late it comes.
type servedRequests struct {
	nc        *nats.Conn
	prefix    string
	msgs      chan *nats.Msg
	quit      chan struct{} // closed to stop collecting
	collected chan struct{} // closed once collecting has stopped

	mu       sync.Mutex
	outcomes []*requestOutcome
	latest   chan *nats.Msg // each reply to the request in flight
}

func newServedRequests(t *testing.T, url string) *servedRequests {
	t.Helper()
	nc, _ := testenv.Connect(t, url)
	r := &servedRequests{nc: nc, prefix: nc.NewRespInbox() + ".", msgs: make(chan *nats.Msg, 4096), latest: make(chan *nats.Msg, 64),
		quit: make(chan struct{}), collected: make(chan struct{})}
	sub, err := nc.ChanSubscribe(r.prefix+"*", r.msgs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	return r
}

// record counts msg against its request.
func (r *servedRequests) record(msg *nats.Msg) {
	seq, err := strconv.Atoi(strings.TrimPrefix(msg.Subject, r.prefix))
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || seq >= len(r.outcomes) {
		return
	}
	o := r.outcomes[seq]
	if msg.Header.Get("Status") == "503" && len(msg.Data) == 0 {
		o.noResponders = true
	} else {
		o.replies = append(o.replies, msg)
	}
	if seq == len(r.outcomes)-1 {
		select {
		case r.latest <- msg:
		default:
		}
	}
}

// run sends requests until stop is closed, waiting for each one's first
// answer (a reply or no responders) up to timeout, and after no responders
// 20 ms, as a caller retrying with a backoff does.
func (r *servedRequests) run(stop <-chan struct{}, timeout time.Duration) error {
	go func() {
		defer close(r.collected)
		for {
			select {
			case msg := <-r.msgs:
				r.record(msg)
			case <-r.quit:
				return
			}
		}
	}()
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		r.mu.Lock()
		seq := len(r.outcomes)
		r.outcomes = append(r.outcomes, &requestOutcome{})
		for len(r.latest) > 0 {
			<-r.latest
		}
		r.mu.Unlock()
		if err := r.nc.PublishRequest(servedSubject, r.prefix+strconv.Itoa(seq), []byte(strconv.Itoa(seq))); err != nil {
			return err
		}
		timer := time.NewTimer(timeout)
		select {
		case msg := <-r.latest:
			if msg.Header.Get("Status") == "503" {
				time.Sleep(20 * time.Millisecond) // the caller's backoff
			}
		case <-timer.C:
		case <-stop:
		}
		timer.Stop()
	}
}

// finish counts every message already delivered, once run has returned
// and a round trip on the connection has brought in what was on its way.
func (r *servedRequests) finish() {
	close(r.quit)
	<-r.collected
	for len(r.msgs) > 0 {
		r.record(<-r.msgs)
	}
}

// lastReply returns the latest reply to any request, or nil.
func (r *servedRequests) lastReply() *nats.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.outcomes) - 1; i >= 0; i-- {
		if n := len(r.outcomes[i].replies); n > 0 {
			return r.outcomes[i].replies[n-1]
		}
	}
	return nil
}

// replyApp is an HTTP application that answers every request with its
// name and the token it was given: "pod-1 41".
func replyApp(t *testing.T, name string) *httptest.Server {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s %s", name, r.Header.Get(election.TokenHeader))
	}))
	t.Cleanup(app.Close)
	return app
}

// servingTokens returns the tokens a sidecar's JSON log says it served
// with.
func servingTokens(t *testing.T, logged string) []uint64 {
	var tokens []uint64
	sc := bufio.NewScanner(strings.NewReader(logged))
	for sc.Scan() {
		var line struct {
			Msg   string `json:"msg"`
			Token uint64 `json:"token"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving the endpoint" {
			tokens = append(tokens, line.Token)
		}
	}
	return tokens
}

// TestSidecarsServeOnlyFromTheLeader is issue 35's "done when": three
// election sidecar --serve svc.report --forward URL, each beside an HTTP
// app that answers with its own name, on one server. Requests go out one
// after another, each with a reply subject of its own, while the leader's
// sidecar is SIGKILLed twice (and restarted) and SIGTERMed once: every
// request gets no reply (no responders, or a timeout across a handover) or
// exactly one, never two; every reply's Fencing-Token is the one its app
// was given, the token the sidecar of that app logged serving with, the
// revision of that sidecar's claim on the key, and never lower than the
// reply before it.
func TestSidecarsServeOnlyFromTheLeader(t *testing.T) {
	t.Parallel()
	began := time.Now()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SVC", TTL: 2 * time.Second})
	// Every write of the key, by revision: the bucket ages them out.
	watchCtx, stopWatching := context.WithCancel(context.Background())
	defer stopWatching()
	w, err := kv.Watch(watchCtx, "report")
	if err != nil {
		t.Fatal(err)
	}
	var writesMu sync.Mutex
	writes := map[uint64]string{}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for entry := range w.Updates() {
			if entry != nil {
				writesMu.Lock()
				writes[entry.Revision()] = string(entry.Value())
				writesMu.Unlock()
			}
		}
	}()
	defer func() { stopWatching(); <-watched }()

	names := []string{"pod-0", "pod-1", "pod-2"}
	apps := map[string]*httptest.Server{}
	procs := map[string][]*e2e.Process{}
	start := func(name string) {
		procs[name] = append(procs[name], e2e.StartProcess(t, bin, name, "sidecar", "--server", url, "--bucket", "SVC", "--key", "report",
			"--name", name, "--listen", "127.0.0.1:0", "--log-format", "json", "--history=false",
			"--serve", servedSubject, "--forward", apps[name].URL+"/report"))
	}
	for _, name := range names {
		apps[name] = replyApp(t, name)
		start(name)
	}
	current := func(name string) *e2e.Process { return procs[name][len(procs[name])-1] }

	reqs := newServedRequests(t, url)
	stop := make(chan struct{})
	sent := make(chan error, 1)
	go func() { sent <- reqs.run(stop, 500*time.Millisecond) }()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-sent
		}
	}()

	// leaderAfter waits for a reply from another app than those of
	// excluded, and returns its name.
	leaderAfter := func(what string, excluded ...string) string {
		t.Helper()
		return testenv.Poll(t, what, e2e.WaitTimeout, func() (string, bool) {
			msg := reqs.lastReply()
			if msg == nil {
				return "", false
			}
			name, _, _ := strings.Cut(string(msg.Data), " ")
			for _, x := range excluded {
				if name == x {
					return name, false
				}
			}
			return name, true
		})
	}
	// more waits until n more requests have gone out.
	more := func(n int) {
		t.Helper()
		reqs.mu.Lock()
		want := len(reqs.outcomes) + n
		reqs.mu.Unlock()
		testenv.Poll(t, fmt.Sprintf("%d more requests", n), e2e.WaitTimeout, func() (int, bool) {
			reqs.mu.Lock()
			defer reqs.mu.Unlock()
			return len(reqs.outcomes), len(reqs.outcomes) >= want
		})
	}
	leader := leaderAfter("a first reply")
	more(30)
	for kill := range 2 {
		p := current(leader)
		p.Cmd.Process.Signal(syscall.SIGKILL)
		p.Wait(t)
		killed := time.Now()
		next := leaderAfter(fmt.Sprintf("a reply from another app than %s's after its SIGKILL", leader), leader)
		t.Logf("SIGKILL %d: %s's sidecar killed; %s answers %v later", kill+1, leader, next, time.Since(killed).Round(time.Millisecond))
		start(leader) // restarted, it waits out its old record, then campaigns
		leader = next
		more(30)
	}
	p := current(leader)
	p.Cmd.Process.Signal(syscall.SIGTERM)
	signalled := time.Now()
	next := leaderAfter(fmt.Sprintf("a reply from another app than %s's after its SIGTERM", leader), leader)
	t.Logf("SIGTERM: %s answers %v after %s's sidecar was told to stop", next, time.Since(signalled).Round(time.Millisecond), leader)
	if code := p.Wait(t); code != ExitOK {
		t.Errorf("%s's sidecar exited %d after SIGTERM", leader, code)
	}
	more(30) // and a few after the last handover
	close(stop)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	// Stop every sidecar and wait until the server has closed their
	// connections, so that any reply they sent has reached the requester's
	// connection; a round trip there brings it in.
	for _, name := range names {
		p := current(name)
		select {
		case <-p.Done():
		default:
			p.Cmd.Process.Signal(syscall.SIGTERM)
			p.Wait(t)
		}
	}
	testenv.Eventually(t, "the sidecars' connections closed", e2e.WaitTimeout, func() bool { return s.NumClients() == 2 })
	// The last claim was written before the reply that followed it, so the
	// watcher has delivered it once a round trip on its connection is done.
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := reqs.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	reqs.finish()

	served := map[uint64]string{} // token → the sidecar that logged serving with it
	for name, ps := range procs {
		for _, p := range ps {
			for _, token := range servingTokens(t, p.Logged(t)) {
				served[token] = name
			}
		}
	}
	reqs.mu.Lock()
	defer reqs.mu.Unlock()
	var answered, noResponders, timedOut, maxReplies int
	var lastToken uint64
	claims := map[uint64]string{}
	writesMu.Lock()
	defer writesMu.Unlock()
	for seq, o := range reqs.outcomes {
		maxReplies = max(maxReplies, len(o.replies))
		switch {
		case len(o.replies) > 1:
			t.Errorf("request %d got %d replies: %q and %q", seq, len(o.replies), o.replies[0].Data, o.replies[1].Data)
		case len(o.replies) == 1:
			answered++
		case o.noResponders:
			noResponders++
		default:
			timedOut++
		}
		if len(o.replies) == 0 {
			continue
		}
		msg := o.replies[0]
		token, err := strconv.ParseUint(msg.Header.Get(election.TokenHeader), 10, 64)
		if err != nil || msg.Header.Get(micro.ErrorCodeHeader) != "" {
			t.Errorf("request %d: reply %q with headers %v: want the app's answer with a token", seq, msg.Data, msg.Header)
			continue
		}
		name, appToken, _ := strings.Cut(string(msg.Data), " ")
		if appToken != strconv.FormatUint(token, 10) || served[token] != name {
			t.Errorf("request %d: reply %q with token %d; the app was given %s, and %q logged serving with it", seq, msg.Data, token, appToken, served[token])
		}
		if token < lastToken {
			t.Errorf("request %d: token %d after a reply with token %d", seq, token, lastToken)
		}
		lastToken = token
		claims[token] = writes[token]
		if writes[token] != name {
			t.Errorf("request %d: %s answered with token %d, but the key's revision %d is %q", seq, name, token, token, writes[token])
		}
	}
	t.Logf("%d requests: %d answered by %d leaders, %d no responders, %d timed out; at most %d replies to one; %v in all",
		len(reqs.outcomes), answered, len(claims), noResponders, timedOut, maxReplies, time.Since(began).Round(time.Millisecond))
	if len(claims) < 4 || answered < 100 {
		t.Errorf("%d leaders answered %d requests; want at least 4 leaders (three handovers) and 100 answers", len(claims), answered)
	}
}

// TestRunServesWhileTheCommandRuns runs election run --serve with a
// --forward URL that nothing listens on, as while the program starts up:
// requests get an error reply 502 carrying the token, and election run
// goes on until SIGTERM, after which nobody serves.
func TestRunServesWhileTheCommandRuns(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "RUNSVC", TTL: 2 * time.Second})
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	p := e2e.StartDaemon(t, bin, "node0", "--server", url, "--bucket", "RUNSVC", "--key", "job", "--history=false",
		"--serve", "svc.run", "--forward", closed.URL, "--", "sleep", "60")
	nc, _ := testenv.Connect(t, url)
	reply := testenv.Poll(t, "a reply on svc.run", e2e.WaitTimeout, func() (*nats.Msg, bool) {
		msg, err := nc.Request("svc.run", []byte("hello"), time.Second)
		return msg, err == nil
	})
	if reply.Header.Get(micro.ErrorCodeHeader) != "502" || !strings.Contains(reply.Header.Get(micro.ErrorHeader), "connection refused") ||
		reply.Header.Get(election.TokenHeader) == "" {
		t.Errorf("reply %q, headers %v: want an error reply 502 saying the connection was refused, with a token", reply.Data, reply.Header)
	}
	select {
	case <-p.Done():
		t.Fatalf("election run exited %d on a forward error; log:\n%s", p.ExitCode(), p.Logged(t))
	default:
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	p.Wait(t)
	if _, err := nc.Request("svc.run", nil, time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("a request after election run stopped: %v, want no responders", err)
	}
	wantLogged(t, p.Logged(t), "serving the endpoint", "stopped serving the endpoint")
}

// TestTheServePermissionsAreExactlyWhatAnEndpointNeeds runs election
// sidecar --serve as a user holding exactly the block election permissions
// --role candidate --serve prints: a request to the subject and micro's
// discovery are answered. Then without each of the endpoint's permissions
// in turn (the queue subscription, $SRV.>, allow_responses), one of them
// is not, or the sidecar exits naming what it was denied.
func TestTheServePermissionsAreExactlyWhatAnEndpointNeeds(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	app := replyApp(t, "app")
	code, block, stderr := runCLI(t, "permissions", "--role", "candidate", "--history=false", "--serve", servedSubject)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	exercise := func(t *testing.T, block string) error {
		user, root := roleServer(t, block)
		rootBucket(t, root)
		p := e2e.StartProcess(t, bin, "pod", "sidecar", "-s", user, "--user", roleUser, "--password", secret,
			"--key", "job", "--name", "pod", "--listen", "127.0.0.1:0", "--history=false", "--log-format", "json",
			"--serve", servedSubject, "--forward", app.URL)
		nc, _ := testenv.Connect(t, root)
		// ask retries subject until it is answered, the sidecar exits, or
		// 10 s have passed.
		ask := func(subject string) error {
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err := nc.Request(subject, []byte("hello"), time.Second)
				select {
				case <-p.Done():
					return fmt.Errorf("the sidecar exited %d: %s", p.ExitCode(), p.Logged(t))
				default:
				}
				if err == nil {
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("no answer on %s: %v", subject, err)
				}
				time.Sleep(50 * time.Millisecond) // the caller's backoff
			}
		}
		if err := ask(servedSubject); err != nil {
			return err
		}
		return ask("$SRV.INFO.job")
	}
	t.Run("exactly", func(t *testing.T) {
		t.Parallel()
		if err := exercise(t, block); err != nil {
			t.Fatal(err)
		}
	})
	full, err := rolePermissions(roleCandidate, defaultBucket, "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	full = full.servePermissions(servedSubject)
	for _, dropped := range []string{servedSubject + " kvelect", "$SRV.>", "allow_responses"} {
		t.Run("without "+dropped, func(t *testing.T) {
			t.Parallel()
			p := full
			p.subAllow = slices.DeleteFunc(slices.Clone(p.subAllow), func(s string) bool { return s == dropped })
			if dropped == "allow_responses" {
				p.allowResponses = false
			}
			err := exercise(t, p.serverBlock())
			switch {
			case err == nil:
				t.Errorf("the endpoint works without %s: it is not needed", dropped)
			case dropped == servedSubject+" kvelect" && !strings.Contains(err.Error(), "election permissions --role candidate --serve "+servedSubject):
				t.Errorf("without %s: %v, want the grant to name --serve %s", dropped, err, servedSubject)
			default:
				t.Logf("as expected: %v", err)
			}
		})
	}
}
