//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/kvelect/election/sidecar"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPausedSidecarShowsTheKeysLeader: a sidecar process that does not lead
// (priority 0) is stopped with SIGSTOP while the leadership moves from a to
// b and b renews past its claim, then continued. From then on its /leader
// names b with b's fencing token and the time b won, or null for either:
// never a renewal's revision taken for the claim, nor the time it woke up.
func TestPausedSidecarShowsTheKeysLeader(t *testing.T) {
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	const ttl = 2 * time.Second
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "PAUSE", TTL: ttl})

	var mu sync.Mutex
	won := map[string]struct {
		token uint64
		at    time.Time
	}{}
	campaign := func(name string) context.CancelFunc {
		e, err := election.NewElection(context.Background(), name, "job", kv, election.WithoutSplay(),
			election.OnWon(func(ctx context.Context) {
				token, _ := election.TokenFromContext(ctx)
				mu.Lock()
				won[name] = struct {
					token uint64
					at    time.Time
				}{token, time.Now()}
				mu.Unlock()
			}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.Start(ctx)
		}()
		stop := func() { cancel(); <-done }
		t.Cleanup(stop)
		if name == "a" {
			testenv.Eventually(t, "a leads", e2e.WaitTimeout, e.IsLeader)
		}
		return stop
	}
	stopA := campaign("a")
	campaign("b")

	isolateNATSEnv(t)
	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	side := e2e.StartProcess(t, bin, "observer", "sidecar", "--server", url, "--bucket", "PAUSE", "--key", "job", "--name", "observer",
		"--priority", "0", "--listen", strings.TrimPrefix(base, "http://"), "--log-format", "json")
	leaderOf := func() (sidecar.Leadership, bool) {
		code, body, err := e2e.Get(base + "/leader")
		var v sidecar.Leadership
		if err != nil || code != 200 || json.Unmarshal([]byte(body), &v) != nil {
			return v, false
		}
		return v, true
	}
	testenv.Poll(t, "the sidecar shows a leading", e2e.WaitTimeout, func() (sidecar.Leadership, bool) {
		v, ok := leaderOf()
		return v, ok && v.Name == "a"
	})

	if err := side.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	cont := func() {
		if !continued {
			continued = true
			side.Cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(cont)
	stopA() // a releases the key; b claims it at once
	// b renews every 1.5 s: its claim is overwritten twice before the
	// sidecar runs again, a TTL and more after it last heard.
	time.Sleep(2 * ttl)
	mu.Lock()
	truth, ok := won["b"]
	mu.Unlock()
	if !ok {
		t.Fatal("b did not win after a stopped")
	}
	cont()
	resumed := time.Now()

	// Every answer for two TTLs after the sidecar resumes.
	sawB := false
	for time.Since(resumed) < 2*ttl {
		v, ok := leaderOf()
		if !ok || v.Name != "b" {
			time.Sleep(20 * time.Millisecond)
			continue // catching up
		}
		if !sawB {
			t.Logf("%v after SIGCONT: %s, token %v, since %v", time.Since(resumed).Round(time.Millisecond), v.Name, jsonOf(v.Token), jsonOf(v.Since))
		}
		sawB = true
		if v.Token != nil && *v.Token != truth.token {
			t.Errorf("%v after SIGCONT: token %d, b's is %d", time.Since(resumed).Round(time.Millisecond), *v.Token, truth.token)
		}
		if v.Since != nil && (v.Since.Before(truth.at.Add(-time.Second)) || v.Since.After(truth.at.Add(200*time.Millisecond))) {
			t.Errorf("%v after SIGCONT: since %v, b won at %v", time.Since(resumed).Round(time.Millisecond), v.Since, truth.at.UTC())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !sawB {
		t.Errorf("the sidecar never showed b leading after SIGCONT")
	}
	t.Logf("b won with token %d at %v", truth.token, truth.at.UTC())
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
