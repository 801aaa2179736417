package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// natsURL is the address of the embedded server the tests and examples
// share; each test has buckets of its own.
var natsURL string

func TestMain(m *testing.M) { testenv.VerifyNoLeaksWithServer(m, &natsURL) }

// awaitTimeout guards against a hang; it is not a speed requirement.
const awaitTimeout = 30 * time.Second

// ttl is the buckets' TTL: the smallest allowed.
const ttl = 2 * time.Second

// newBucket creates a bucket named after the test and returns it opened on
// a connection of its own, for the test's own writes (resign, transfer,
// deletes).
func newBucket(t *testing.T) (name string, admin *election.Bucket) {
	name, admin, _ = newBucketKV(t)
	return name, admin
}

// newBucketKV is newBucket, with the bucket's KeyValue on the test's
// connection.
func newBucketKV(t *testing.T) (name string, admin *election.Bucket, kv jetstream.KeyValue) {
	t.Helper()
	return newBucketTTL(t, ttl)
}

// newBucketTTL is newBucketKV, for a bucket whose TTL is ttl.
func newBucketTTL(t *testing.T, ttl time.Duration) (name string, admin *election.Bucket, kv jetstream.KeyValue) {
	t.Helper()
	name = strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	_, js := testenv.Connect(t, natsURL)
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: name, TTL: ttl, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteKeyValue(context.Background(), name) })
	b, err := election.OpenBucket(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return name, b, kv
}

// candidate is one process of a test: its connection, election and
// endpoint.
type candidate struct {
	name    string
	nc      *nats.Conn
	e       *election.Election
	ep      *Endpoint
	leading chan context.Context // each leadership, as OnWon gets it
	served  chan error           // what Serve returned, for each
}

// startCandidate starts an election for key in bucket, on a connection of
// its own, whose OnWon serves subject with h, opening the bucket with the
// default options opts (such as WithClock); it stops when the test ends.
func startCandidate(t *testing.T, bucket, key, name, subject string, h Handler, opts ...election.Option) *candidate {
	t.Helper()
	nc, js := testenv.Connect(t, natsURL)
	c := &candidate{name: name, nc: nc, leading: make(chan context.Context, 16), served: make(chan error, 16)}
	ep, err := New(nc, Config{Subject: subject, Handler: h, Name: ServiceName(bucket), Logger: testenv.Logger(t).With("candidate", name)})
	if err != nil {
		t.Fatal(err)
	}
	c.ep = ep
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, kv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c.e, err = b.NewElection(name, key, election.WithoutSplay(), election.OnWon(func(leading context.Context) {
		c.leading <- leading
		c.served <- c.ep.Serve(leading)
	}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.e.Start(context.Background()); err != nil {
			t.Errorf("%s: Start: %v", name, err)
		}
	}()
	t.Cleanup(func() {
		c.e.Stop()
		<-done
		b.Close()
	})
	return c
}

// nameReply is a handler that answers with the candidate's name.
func nameReply(name string) Handler {
	return func(ctx context.Context, req micro.Request) (Reply, error) {
		return Reply{Data: []byte(name)}, nil
	}
}

// askUntil sends requests to subject, retrying as a caller does (no
// responders, timeouts), until a reply satisfies want, and returns it.
func askUntil(t *testing.T, nc *nats.Conn, subject, what string, want func(*nats.Msg) bool) *nats.Msg {
	t.Helper()
	return testenv.Poll(t, what, awaitTimeout, func() (*nats.Msg, bool) {
		msg, err := nc.Request(subject, []byte("hello"), time.Second)
		return msg, err == nil && want(msg)
	})
}

// tokenOf is the reply's Fencing-Token.
func tokenOf(t *testing.T, msg *nats.Msg) uint64 {
	t.Helper()
	token, err := strconv.ParseUint(msg.Header.Get(election.TokenHeader), 10, 64)
	if err != nil {
		t.Fatalf("reply %q: %s header %q: %v", msg.Data, election.TokenHeader, msg.Header.Get(election.TokenHeader), err)
	}
	return token
}

// TestTheEndpointMovesWithTheLeadership runs two candidates serving one
// subject: requests reach the leader, with its token, and after a
// resignation, a transfer and a Stop, the new leader; micro discovery finds
// the leader's service with its token.
func TestTheEndpointMovesWithTheLeadership(t *testing.T) {
	t.Parallel()
	bucket, admin := newBucket(t)
	subject := "svc." + bucket
	a := startCandidate(t, bucket, "job", "a", subject, nameReply("a"))
	b := startCandidate(t, bucket, "job", "b", subject, nameReply("b"))
	byName := map[string]*candidate{"a": a, "b": b}
	nc, _ := testenv.Connect(t, natsURL)
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()

	msg := askUntil(t, nc, subject, "a reply", func(*nats.Msg) bool { return true })
	first := byName[string(msg.Data)]
	if got, want := tokenOf(t, msg), first.e.Token(); got != want {
		t.Fatalf("%s's reply carries token %d; its election's token is %d", first.name, got, want)
	}
	var info micro.Info
	infoMsg, err := nc.Request("$SRV.INFO."+bucket, nil, awaitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(infoMsg.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Metadata["fencing_token"] != strconv.FormatUint(first.e.Token(), 10) || len(info.Endpoints) != 1 ||
		info.Endpoints[0].Subject != subject || info.Endpoints[0].QueueGroup != DefaultQueueGroup {
		t.Errorf("micro info %+v: want the leader's token %d and one endpoint on %s in queue group %s", info, first.e.Token(), subject, DefaultQueueGroup)
	}

	second := a
	if first == a {
		second = b
	}
	testenv.Poll(t, "both candidates listed", awaitTimeout, func() (int, bool) {
		cs, err := admin.Candidates(ctx, "job")
		return len(cs), err == nil && len(cs) == 2
	})
	last := tokenOf(t, msg)
	moved := func(to *candidate, how string) {
		t.Helper()
		msg := askUntil(t, nc, subject, "a reply from "+to.name+" after "+how, func(m *nats.Msg) bool { return string(m.Data) == to.name })
		token := tokenOf(t, msg)
		if token <= last {
			t.Errorf("after %s, %s answers with token %d, not above %d", how, to.name, token, last)
		}
		last = token
	}
	if _, err := admin.Resign(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	moved(second, "the resignation")
	if _, err := admin.Transfer(ctx, "job", first.name); err != nil {
		t.Fatal(err)
	}
	moved(first, "the transfer")
	first.e.Stop()
	moved(second, "Stop")
	for _, c := range []*candidate{a, b} {
		for len(c.served) > 0 {
			if err := <-c.served; err != nil {
				t.Errorf("%s: Serve: %v", c.name, err)
			}
		}
	}
}

// TestNoReplyOnceTheLeadershipEnded has the handler return only after the
// leadership has ended (Stop): its reply is not sent, and Serve
// returns once the handler has. Without the check of the leadership after
// the handler returns, the reply arrives and the test fails.
func TestNoReplyOnceTheLeadershipEnded(t *testing.T) {
	t.Parallel()
	bucket, _ := newBucket(t)
	subject := "svc." + bucket
	entered := make(chan context.Context, 1)
	var leadingCtx atomic.Pointer[context.Context]
	a := startCandidate(t, bucket, "job", "a", subject, func(ctx context.Context, req micro.Request) (Reply, error) {
		if string(req.Data()) != "wait" {
			return Reply{Data: []byte("a")}, nil
		}
		leading := *leadingCtx.Load()
		entered <- leading
		<-leading.Done()
		return Reply{Data: []byte("late")}, nil
	})
	leading := <-a.leading
	leadingCtx.Store(&leading)
	nc, _ := testenv.Connect(t, natsURL)
	askUntil(t, nc, subject, "the leader serving", func(*nats.Msg) bool { return true })

	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest(subject, inbox, []byte("wait")); err != nil {
		t.Fatal(err)
	}
	<-entered
	stopped := make(chan struct{})
	go func() { // Stop returns once OnWon has, which waits for the handler
		defer close(stopped)
		a.e.Stop()
	}()
	defer func() { <-stopped }()
	if err := <-a.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	// Serve has returned, so the handler has, and any reply it sent left on
	// a's connection: a round trip there and then on the requester's
	// connection brings it in.
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := sub.Pending(); n != 0 {
		msg, _ := sub.NextMsg(0)
		t.Fatalf("the request got a reply after the leadership ended: %q, token %s", msg.Data, msg.Header.Get(election.TokenHeader))
	}
}

// TestAPausedLeaderNeverAnswersLate stalls the leader's handler in a
// request, as a pause would, while another client deletes its key: the
// leader stands down, its Serve gives up on the handler at the work
// deadline, a candidate leads again (either) and answers with a higher
// token, and the stalled handler's reply, returned after all that, is
// never sent.
func TestAPausedLeaderNeverAnswersLate(t *testing.T) {
	t.Parallel()
	bucket, _, kv := newBucketKV(t)
	subject := "svc." + bucket
	stalled, release := make(chan struct{}), make(chan struct{})
	handled := make(chan struct{}, 1)
	a := startCandidate(t, bucket, "job", "a", subject, func(ctx context.Context, req micro.Request) (Reply, error) {
		if string(req.Data()) == "stall" {
			close(stalled)
			<-release
		}
		return Reply{Data: []byte("a")}, nil
	})
	a.ep.handled = func() {
		select {
		case handled <- struct{}{}:
		default:
		}
	}
	<-a.leading
	nc, _ := testenv.Connect(t, natsURL)
	msg := askUntil(t, nc, subject, "a serving", func(*nats.Msg) bool { return true })
	aToken := tokenOf(t, msg)
	<-handled
	startCandidate(t, bucket, "job", "b", subject, nameReply("b"))

	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest(subject, inbox, []byte("stall")); err != nil {
		t.Fatal(err)
	}
	<-stalled
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	if err := kv.Delete(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	err = <-a.served
	if err == nil || !strings.Contains(err.Error(), "work deadline") {
		t.Errorf("Serve returned %v; want an error saying a request was still handled at the work deadline", err)
	}
	askUntil(t, nc, subject, "a leader with a token above "+strconv.FormatUint(aToken, 10), func(m *nats.Msg) bool { return tokenOf(t, m) > aToken })

	close(release) // the stalled handler returns, with a's reply
	<-handled
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := sub.Pending(); n != 0 {
		msg, _ := sub.NextMsg(0)
		t.Fatalf("the stalled request got a reply after a's leadership ended: %q, token %s", msg.Data, msg.Header.Get(election.TokenHeader))
	}
}

// TestTwoSubscriptionsShareEachRequest serves one subject from the
// leaders of two keys at once, as a paused ex-leader's lingering
// subscription would beside its successor's: each request gets exactly one
// reply, for the queue group. Without it each request gets two.
func TestTwoSubscriptionsShareEachRequest(t *testing.T) {
	t.Parallel()
	bucket, _ := newBucket(t)
	subject := "svc." + bucket
	var handled atomic.Int64
	count := func() { handled.Add(1) }
	one := startCandidate(t, bucket, "one", "a", subject, nameReply("one"))
	two := startCandidate(t, bucket, "two", "a", subject, nameReply("two"))
	one.ep.handled, two.ep.handled = count, count
	<-one.leading
	<-two.leading
	nc, _ := testenv.Connect(t, natsURL)
	// Both serve once each has answered.
	askUntil(t, nc, subject, "one serving", func(m *nats.Msg) bool { return string(m.Data) == "one" })
	askUntil(t, nc, subject, "two serving", func(m *nats.Msg) bool { return string(m.Data) == "two" })

	const n = 100
	replies := make(chan *nats.Msg, 4*n)
	sub, err := nc.ChanSubscribe(nc.NewRespInbox()+".*", replies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	prefix := strings.TrimSuffix(sub.Subject, "*")
	handled.Store(0)
	for i := range n {
		if err := nc.PublishRequest(subject, prefix+strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	perRequest := map[string]int{}
	for len(perRequest) < n {
		select {
		case msg := <-replies:
			perRequest[msg.Subject]++
		case <-time.After(awaitTimeout):
			t.Fatalf("%d of %d requests answered", len(perRequest), n)
		}
	}
	for _, c := range []*candidate{one, two} {
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for len(replies) > 0 {
		perRequest[(<-replies).Subject]++
	}
	if got := handled.Load(); got != n {
		t.Errorf("the endpoints handled %d requests, want %d", got, n)
	}
	for subj, k := range perRequest {
		if k != 1 {
			t.Errorf("request %s got %d replies", subj, k)
		}
	}
}

// TestServeNeedsALiveLeadership refuses a context that is not a
// leadership's, and one whose leadership has ended.
func TestServeNeedsALiveLeadership(t *testing.T) {
	t.Parallel()
	nc, _ := testenv.Connect(t, natsURL)
	ep, err := New(nc, Config{Subject: "svc.none", Handler: nameReply("x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := ep.Serve(context.Background()); !errors.Is(err, ErrNotLeading) {
		t.Errorf("Serve(context.Background()) = %v, want ErrNotLeading", err)
	}

	bucket, _ := newBucket(t)
	c := startCandidate(t, bucket, "job", "a", "svc."+bucket, nameReply("a"))
	leading := <-c.leading
	c.e.Stop()
	if err := <-c.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if err := c.ep.Serve(leading); !errors.Is(err, ErrNotLeading) {
		t.Errorf("Serve of an ended leadership = %v, want ErrNotLeading", err)
	}
}

// TestNewChecksTheConfig refuses what it cannot serve, naming what is
// allowed.
func TestNewChecksTheConfig(t *testing.T) {
	t.Parallel()
	nc, _ := testenv.Connect(t, natsURL)
	h := nameReply("x")
	for _, tc := range []struct {
		cfg  Config
		says string
	}{
		{Config{Subject: "", Handler: h}, "empty"},
		{Config{Subject: "svc.*", Handler: h}, "wildcard"},
		{Config{Subject: "svc.>", Handler: h}, "wildcard"},
		{Config{Subject: "svc report", Handler: h}, "white space"},
		{Config{Subject: "svc..report", Handler: h}, "empty token"},
		{Config{Subject: ".svc", Handler: h}, "empty token"},
		{Config{Subject: "svc.", Handler: h}, "empty token"},
		{Config{Subject: "$SRV.x", Handler: h}, "starting with $"},
		{Config{Subject: "svc.report"}, "handler"},
		{Config{Subject: "svc.report", Handler: h, Name: "a.b"}, "allowed: letters"},
		{Config{Subject: "svc.report", Handler: h, QueueGroup: "a b"}, "queue group"},
	} {
		_, err := New(nc, tc.cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("New(%+v) = %v; want ErrInvalidConfig saying %q", tc.cfg, err, tc.says)
		}
	}
	if _, err := New(nil, Config{Subject: "svc.report", Handler: h}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New(nil) = %v, want ErrInvalidConfig", err)
	}
	if _, err := New(nc, Config{Subject: "svc.report-1/a=b", Handler: h}); err != nil {
		t.Errorf("New(svc.report-1/a=b) = %v", err)
	}
}

func TestServiceName(t *testing.T) {
	for key, want := range map[string]string{"reports": "reports", "reports/eu.west": "reports_eu_west", "a=b-c_d": "a_b-c_d", "": "kvelect"} {
		got := ServiceName(key)
		if got != want || CheckServiceName(got) != nil {
			t.Errorf("ServiceName(%q) = %q, want %q", key, got, want)
		}
	}
}
