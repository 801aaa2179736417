package fence_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fence"
)

// serve runs one request through h with the Fencing-Token headers given,
// and returns the answer's status and body.
func serve(h http.Handler, path string, tokens ...string) (int, string) {
	req := httptest.NewRequest("POST", path, nil)
	for _, tok := range tokens {
		req.Header.Add(election.TokenHeader, tok)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

var ok = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

func newHTTP(t *testing.T, opts ...fence.HTTPOption) *fence.HTTP {
	t.Helper()
	h, err := fence.NewHTTP(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHTTPAcceptsEqualAndHigherTokensAndRefusesLower(t *testing.T) {
	f := newHTTP(t)
	h := f.Handler(ok)
	for _, c := range []struct {
		token string
		code  int
	}{{"5", 200}, {"5", 200}, {"9", 200}, {"5", 409}, {"8", 409}, {"9", 200}, {"10", 200}} {
		if code, body := serve(h, "/", c.token); code != c.code {
			t.Fatalf("token %s: %d %q, want %d", c.token, code, body, c.code)
		}
	}
	if got := f.Highest(fence.DefaultResource); got != 10 {
		t.Fatalf("Highest: %d, want 10", got)
	}
}

func TestHTTPRefusesAMissingOrMalformedHeaderNamingIt(t *testing.T) {
	h := newHTTP(t).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the handler ran for a request without a valid token")
	}))
	for _, tokens := range [][]string{nil, {""}, {"abc"}, {"0"}, {"-1"}, {"+1"}, {" 1"}, {"1.0"}, {"18446744073709551616"}, {"1", "2"}} {
		code, body := serve(h, "/", tokens...)
		if code != http.StatusBadRequest || !strings.Contains(body, election.TokenHeader) || !strings.Contains(body, "from 1 to 18446744073709551615") {
			t.Errorf("tokens %q: %d %q, want 400 naming the header and what is allowed", tokens, code, body)
		}
	}
}

func TestHTTPKeepsOneHighestTokenPerResource(t *testing.T) {
	f := newHTTP(t, fence.WithResource(func(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/") }))
	h := f.Handler(ok)
	for _, c := range []struct {
		path, token string
		code        int
	}{{"/a", "9", 200}, {"/b", "3", 200}, {"/a", "3", 409}, {"/b", "2", 409}, {"/", "1", 400}} {
		if code, body := serve(h, c.path, c.token); code != c.code {
			t.Errorf("%s with token %s: %d %q, want %d", c.path, c.token, code, body, c.code)
		}
	}
	if _, err := fence.NewHTTP(fence.WithResource(nil)); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Errorf("WithResource(nil): %v, want ErrInvalidArgument", err)
	}
}

func TestHTTPSeedRaisesTheHighestToken(t *testing.T) {
	f := newHTTP(t)
	f.Seed(fence.DefaultResource, 7)
	f.Seed(fence.DefaultResource, 4) // never lowers it
	h := f.Handler(ok)
	if code, _ := serve(h, "/", "6"); code != http.StatusConflict {
		t.Fatalf("token 6 after a seed of 7: %d, want 409", code)
	}
	if code, _ := serve(h, "/", "7"); code != http.StatusOK {
		t.Fatalf("token 7 after a seed of 7: %d, want 200", code)
	}
}

// Backed by a KV fence, the highest token outlives the process: a new
// fence on the same bucket (a restarted replica, or another) refuses what
// the first accepted a higher token over.
func TestHTTPBackedByKVRemembersAcrossRestarts(t *testing.T) {
	kvf, _ := kvFence(t)
	first := newHTTP(t, fence.WithKV(kvf))
	if code, body := serve(first.Handler(ok), "/", "9"); code != http.StatusOK {
		t.Fatalf("token 9: %d %q", code, body)
	}
	restarted := newHTTP(t, fence.WithKV(kvf))
	h := restarted.Handler(ok)
	if code, body := serve(h, "/", "5"); code != http.StatusConflict || !strings.Contains(body, "9") {
		t.Fatalf("token 5 after a restart: %d %q, want 409 naming 9", code, body)
	}
	if got := restarted.Highest(fence.DefaultResource); got != 9 {
		t.Fatalf("Highest after a refusal from the bucket: %d, want 9", got)
	}
	if code, body := serve(h, "/", "9"); code != http.StatusOK {
		t.Fatalf("token 9 after a restart: %d %q", code, body)
	}
	rec, err := kvf.Get(context.Background(), fence.DefaultResource)
	if err != nil || rec.Token != 9 {
		t.Fatalf("the bucket holds %+v (%v), want token 9", rec, err)
	}
}

// Many requests at once with random tokens: the effects the handler
// applies, in the order it applies them, never go down in token, and no
// two run at once for a resource.
func TestHTTPConcurrentRequestsApplyNeverDecreasingTokens(t *testing.T) {
	f := newHTTP(t)
	var applied []uint64 // the handler's effect; only the fence's lock guards it
	var inside atomic.Int32
	h := f.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if inside.Add(1) != 1 {
			t.Error("two requests of one resource handled at once")
		}
		defer inside.Add(-1)
		token, err := fence.ParseToken(r.Header.Get(election.TokenHeader))
		if err != nil {
			t.Error(err)
		}
		runtime.Gosched() // a handler that takes time: let the others run
		applied = append(applied, token)
	}))
	writes := concurrently(8, 50, func(token uint64) (uint64, error) {
		code, body := serve(h, "/", fmt.Sprint(token))
		switch code {
		case http.StatusOK:
			return 1, nil
		case http.StatusConflict:
			return 0, &fence.StaleError{Token: token, Highest: token + 1} // the body says more
		default:
			return 0, fmt.Errorf("%d %s", code, body)
		}
	})
	accepted := 0
	for _, w := range writes {
		if w.err != nil && !errors.Is(w.err, fence.ErrStale) {
			t.Fatal(w.err)
		}
		if w.err == nil {
			accepted++
		}
	}
	if accepted != len(applied) || accepted == 0 || accepted == len(writes) {
		t.Fatalf("%d of %d requests accepted, %d applied", accepted, len(writes), len(applied))
	}
	for i := 1; i < len(applied); i++ {
		if applied[i] < applied[i-1] {
			t.Fatalf("token %d applied after token %d", applied[i], applied[i-1])
		}
	}
}

// A request waiting for its resource while another is handled gives up with
// 503 when its context ends.
func TestHTTPARequestEndedWhileWaitingGets503(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := newHTTP(t).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(entered)
		<-release
	}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(h, "/", "1")
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, "POST", "/", nil)
	req.Header.Set(election.TokenHeader, "2")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	close(release)
	<-done
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "waiting") {
		t.Fatalf("%d %q, want 503", rec.Code, rec.Body.String())
	}
}
