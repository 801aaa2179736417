package endpoint

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// TestForwardPassesRequestsToTheApp serves a subject by forwarding to an
// HTTP application and checks each part of the mapping: data and headers
// to the app with the leader's token (not the requester's), the method
// header, the body and headers back, a non-2xx status as a micro error
// reply naming it, a refused method, and an app that cannot be reached,
// named without the URL's secrets.
func TestForwardPassesRequestsToTheApp(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, token, custom, body string
	}
	got := make(chan seen, 16)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Header.Get(election.TokenHeader), r.Header.Get("X-Custom"), string(body)}
		w.Header().Set("X-App", "yes")
		if string(body) == "fail" {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "not now")
			return
		}
		io.WriteString(w, "echo "+string(body))
	}))
	defer app.Close()
	forward, err := Forward(app.URL+"/report", nil)
	if err != nil {
		t.Fatal(err)
	}
	bucket, _ := newBucket(t)
	subject := "svc." + bucket
	c := startCandidate(t, bucket, "job", "a", subject, forward)
	<-c.leading
	token := strconv.FormatUint(c.e.Token(), 10)
	nc, _ := testenv.Connect(t, natsURL)

	ask := func(data string, header nats.Header) *nats.Msg {
		t.Helper()
		msg := nats.NewMsg(subject)
		msg.Data, msg.Header = []byte(data), header
		return testenv.Poll(t, "a reply", awaitTimeout, func() (*nats.Msg, bool) {
			reply, err := nc.RequestMsg(msg, awaitTimeout)
			return reply, err == nil
		})
	}
	reply := ask("hello", nats.Header{"X-Custom": {"v"}, election.TokenHeader: {"999"}})
	if s := <-got; s != (seen{"POST", token, "v", "hello"}) {
		t.Errorf("the app saw %+v; want a POST of hello with X-Custom v and the leader's token %s", s, token)
	}
	if string(reply.Data) != "echo hello" || reply.Header.Get("X-App") != "yes" || reply.Header.Get(election.TokenHeader) != token {
		t.Errorf("reply %q, headers %v; want the app's body and headers, and token %s", reply.Data, reply.Header, token)
	}

	reply = ask("", nats.Header{"http-method": {"get"}})
	if s := <-got; s.method != "GET" {
		t.Errorf("with %s get the app saw %s", MethodHeader, s.method)
	}
	if reply.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Errorf("GET: an error reply %v", reply.Header)
	}

	reply = ask("fail", nil)
	<-got
	if reply.Header.Get(micro.ErrorCodeHeader) != "503" || reply.Header.Get(micro.ErrorHeader) != "HTTP 503 Service Unavailable" ||
		string(reply.Data) != "not now" || reply.Header.Get(election.TokenHeader) != token {
		t.Errorf("a 503 from the app gave reply %q with headers %v; want an error reply 503 naming the status, with the body and token %s", reply.Data, reply.Header, token)
	}

	reply = ask("x", nats.Header{MethodHeader: {"TRACE"}})
	if reply.Header.Get(micro.ErrorCodeHeader) != "400" || !strings.Contains(reply.Header.Get(micro.ErrorHeader), "want one of GET") {
		t.Errorf("TRACE gave the error %v; want 400 naming the methods allowed", reply.Header)
	}
	if len(got) != 0 {
		t.Errorf("TRACE reached the app: %+v", <-got)
	}
}

// TestForwardRefusesRedirectsAndOversizedResponses: a redirect is an error
// reply naming its status, and its target is never called (the token goes
// to the URL given alone); a response over MaxResponseBytes is a 502.
func TestForwardRefusesRedirectsAndOversizedResponses(t *testing.T) {
	t.Parallel()
	followed := make(chan struct{}, 1)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed <- struct{}{}
			return
		}
		switch body, _ := io.ReadAll(r.Body); string(body) {
		case "redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "big":
			w.Write(make([]byte, MaxResponseBytes+1))
		}
	}))
	defer app.Close()
	forward, err := Forward(app.URL+"/report", nil)
	if err != nil {
		t.Fatal(err)
	}
	bucket, _ := newBucket(t)
	subject := "svc." + bucket
	c := startCandidate(t, bucket, "job", "a", subject, forward)
	<-c.leading
	nc, _ := testenv.Connect(t, natsURL)
	ask := func(data string) *nats.Msg {
		t.Helper()
		return testenv.Poll(t, "a reply", awaitTimeout, func() (*nats.Msg, bool) {
			reply, err := nc.Request(subject, []byte(data), awaitTimeout)
			return reply, err == nil
		})
	}
	if reply := ask("redirect"); reply.Header.Get(micro.ErrorCodeHeader) != "302" {
		t.Errorf("a redirect gave the reply headers %v; want an error reply 302", reply.Header)
	}
	if len(followed) != 0 {
		t.Error("the redirect was followed: the token went to another URL")
	}
	if reply := ask("big"); reply.Header.Get(micro.ErrorCodeHeader) != "502" || !strings.Contains(reply.Header.Get(micro.ErrorHeader), "larger than") {
		t.Errorf("a response over MaxResponseBytes gave the reply headers %v; want 502 saying it is too large", reply.Header)
	}
}

// TestForwardToAnAppNotListening answers 502, naming the failure but not
// the URL's password or query.
func TestForwardToAnAppNotListening(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	forward, err := Forward("http://user:s3cret@"+addr+"/x?key=q5ecret", nil)
	if err != nil {
		t.Fatal(err)
	}
	bucket, _ := newBucket(t)
	subject := "svc." + bucket
	startCandidate(t, bucket, "job", "a", subject, forward)
	nc, _ := testenv.Connect(t, natsURL)
	reply := askUntil(t, nc, subject, "a reply", func(*nats.Msg) bool { return true })
	says := reply.Header.Get(micro.ErrorHeader)
	if reply.Header.Get(micro.ErrorCodeHeader) != "502" || !strings.Contains(says, "connection refused") || !strings.Contains(says, "http://"+addr+"/x") {
		t.Errorf("error reply %v; want 502 saying the connection to http://%s/x was refused", reply.Header, addr)
	}
	if strings.Contains(says, "s3cret") || strings.Contains(says, "q5ecret") {
		t.Errorf("the error reply shows the URL's secrets: %s", says)
	}
}

// TestCheckURL refuses what Forward cannot call, without showing the
// URL's secrets.
func TestCheckURL(t *testing.T) {
	t.Parallel()
	for target, says := range map[string]string{
		"ftp://u:s3cret@host/x":    "http or https",
		"127.0.0.1:8080":           "want http://HOST",
		"http:///path?k=s3cret":    "no host",
		"http://u:s3cret@[::1/":    "does not parse",
		"":                         "http or https",
		"https://u:s3cret@%zz.com": "does not parse",
	} {
		err := CheckURL(target)
		if err == nil || !strings.Contains(err.Error(), says) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("CheckURL(%q) = %v; want an error saying %q, without the secret", target, err, says)
		}
	}
	for _, ok := range []string{"http://127.0.0.1:8080/report", "https://app.example.com"} {
		if err := CheckURL(ok); err != nil {
			t.Errorf("CheckURL(%q) = %v", ok, err)
		}
	}
}
