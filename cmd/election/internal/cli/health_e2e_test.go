//go:build linux

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRunHandsOverWhenItsHealthCommandFails runs two election runs with a
// --health-cmd each; the leader's starts failing: within its 3 checks of
// 100 ms it stops its command and releases the key, and the other starts
// the command with a larger token, long before the key's TTL of 10 s could
// have passed; the history says why.
func TestRunHandsOverWhenItsHealthCommandFails(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2EHEALTH", TTL: 10 * time.Second})
	h, err := history.Create(context.Background(), js, "E2EHEALTH", 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	starts, cmd := recordedStarts(t)
	runs := map[string]*e2e.Process{}
	for _, name := range []string{"node0", "node1"} {
		health := "test ! -e " + filepath.Join(dir, name+".sick") + ` || { echo "$(hostname): database unreachable"; exit 1; }`
		runs[name] = e2e.StartDaemon(t, bin, name, "--server", s.ClientURL(), "--bucket", "E2EHEALTH", "--key", "job",
			"--health-cmd", health, "--health-interval", "100ms", "--health-failures", "3", "--", cmd[0], cmd[1], cmd[2])
	}
	first := e2e.WaitStarts(t, starts, 1)[0]

	began := time.Now()
	if err := os.WriteFile(filepath.Join(dir, first.Name+".sick"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	second := e2e.WaitStarts(t, starts, 2)[1]
	took := time.Since(began)
	if second.Name == first.Name || second.Token <= first.Token {
		t.Fatalf("after %s's health command began to fail, the command started on %s with token %d; want the other node, a token above %d",
			first.Name, second.Name, second.Token, first.Token)
	}
	// 3 failed checks, the first at most 100 ms after the file appeared,
	// and the command's stop: far less than the TTL an expiry would take.
	if took > 3*time.Second {
		t.Errorf("the command moved %v after the leader's health command began to fail, want within 3s", took)
	}
	t.Logf("the command moved %v after the leader's health command began to fail", took.Round(time.Millisecond))
	e2e.WaitDead(t, first.PID)
	wantLogged(t, runs[first.Name].Logged(t), "the health check failed; the leader stands down if it fails as often in a row as allowed",
		"database unreachable", "the health check failed too often; standing down and releasing the key")

	events := testenv.Poll(t, "the history to record the stand-down", e2e.WaitTimeout, func() ([]history.Event, bool) {
		events, err := h.Events(context.Background(), "job", time.Time{})
		for _, ev := range events {
			if ev.Kind == history.StoodDown {
				return events, err == nil
			}
		}
		return events, false
	})
	for _, ev := range events {
		if ev.Kind == history.StoodDown && (ev.Name != first.Name || !strings.Contains(ev.Cause, "health check failed: 3 times in a row") || !strings.Contains(ev.Cause, "database unreachable")) {
			t.Errorf("the history's stand-down: %+v, want %s's, its cause naming the health check and its output", ev, first.Name)
		}
	}
}
