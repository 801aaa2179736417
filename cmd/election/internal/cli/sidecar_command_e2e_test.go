//go:build linux

package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSidecarProcessHandsOverOnSIGTERM runs two election sidecar processes
// on one key, with a TTL far longer than the bound it checks: SIGTERM to
// the leader removes its leader file, releases the key and exits 0, and the
// other sidecar's event stream shows itself leading within a second.
func TestSidecarProcessHandsOverOnSIGTERM(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SIDE", TTL: 10 * time.Second})
	ports, err := embedded.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	procs := map[*sidecarInstance]*e2e.Process{}
	var sidecars []*sidecarInstance
	for i, port := range ports {
		sc := &sidecarInstance{
			name:       fmt.Sprintf("pod-%d", i),
			base:       fmt.Sprintf("http://127.0.0.1:%d", port),
			leaderFile: filepath.Join(t.TempDir(), "leader"),
		}
		procs[sc] = e2e.StartProcess(t, bin, sc.name, "sidecar", "--server", url, "--bucket", "SIDE", "--key", "job", "--name", sc.name,
			"--listen", strings.TrimPrefix(sc.base, "http://"), "--leader-file", sc.leaderFile, "--log-format", "json")
		sidecars = append(sidecars, sc)
	}

	first := waitSidecarLeader(t, sidecars...)
	other := sidecars[0]
	if other == first {
		other = sidecars[1]
	}
	// Hand the key to the other, which proves it campaigns; the first
	// leader, which led, campaigns on.
	token := transferTo(t, url, "SIDE", "job", other.name)
	if leader := waitSidecarLeader(t, sidecars...); leader != other {
		t.Fatalf("%s leads after the transfer to %s", leader.name, other.name)
	}
	if got, want := other.leaderFileHolds(t), fmt.Sprintf("%d\n", token); got != want {
		t.Errorf("the leader's file holds %q, want %q", got, want)
	}
	stream := openEvents(t, first)

	leader := procs[other]
	leader.Cmd.Process.Signal(syscall.SIGTERM)
	signalled := time.Now()
	v := stream.next(t, first.name+" leading after SIGTERM to "+other.name, signalled.Add(eventLatency), led(first.name))
	t.Logf("%s led %v after SIGTERM to %s", first.name, time.Since(signalled).Round(time.Millisecond), other.name)
	if !v.IsLeader || v.Token == nil || *v.Token <= token {
		t.Errorf("event %+v: want is_leader with a token above %d", v, token)
	}
	if got := other.leaderFileHolds(t); got != "" {
		t.Errorf("the stopped leader's file still holds %q when the next leader leads", got)
	}
	if code := leader.Wait(t); code != ExitOK {
		t.Errorf("the sidecar exited %d after SIGTERM, want 0; log:\n%s", code, leader.Logged(t))
	}
	wantLogged(t, leader.Logged(t), "leading: /self answers 200", "leadership ended", "released the key")
	if _, _, err := e2e.Get(other.base + "/healthz"); err == nil {
		t.Errorf("the stopped sidecar still answers on %s", other.base)
	}
}
