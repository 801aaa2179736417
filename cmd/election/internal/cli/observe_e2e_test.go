//go:build linux

package cli

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStatusWatchPrintsChangesUntilSIGINT watches a key while its leader
// resigns, then interrupts the watch, which must exit 0.
func TestStatusWatchPrintsChangesUntilSIGINT(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	elections := candidates(t, url, "E", "job", "node0", "node1")
	first := waitLeader(t, elections)

	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	watch := e2e.StartWatched(t, "status --watch", bin, "status", "-s", url, "--bucket", "E", "--key", "job", "--watch", "--metrics", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	next := func() []string {
		t.Helper()
		return strings.Fields(watch.Next(t))
	}

	if header := strings.Join(next(), " "); header != "TIME KEY LEADER REVISION" {
		t.Fatalf("header %q, want TIME KEY LEADER REVISION", header)
	}
	if f := next(); len(f) != 4 || f[1] != "job" || f[2] != first {
		t.Fatalf("first line %q, want job and its leader %s", f, first)
	}
	wantSeries(t, base, `kvelect_election_has_leader{key="job"}`, 1)
	wantSeries(t, base, `kvelect_election_leader_changes_seen_total{key="job"}`, 0)
	wantBuildInfo(t, base)
	code, out, errOut := runCLI(t, "resign", "-s", url, "--bucket", "E", "--key", "job")
	if code != 0 {
		t.Fatalf("resign: exit %d, %s%s", code, out, errOut)
	}
	second := waitLeader(t, elections)
	// The release shows as nobody (unless the claim replaced it before the
	// watcher got it), then the next leader claims the key.
	for f := next(); f[2] != second; f = next() {
		if f[2] != "none" {
			t.Fatalf("line %q after resign: want none or %s", f, second)
		}
	}
	wantSeries(t, base, `kvelect_election_leader_changes_seen_total{key="job"}`, 1)
	wantSeries(t, base, `kvelect_election_has_leader{key="job"}`, 1)

	if err := watch.Interrupt(); err != nil {
		t.Errorf("status --watch after SIGINT: %v, want exit 0; stderr %q", err, watch.Stderr())
	}
}

// TestRunServesMetricsAndHealth runs election run --metrics and scrapes it
// while it leads; the server goes away when it exits.
func TestRunServesMetricsAndHealth(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	starts, cmd := recordedStarts(t)
	d := e2e.StartDaemon(t, bin, "solo", "--server", s.ClientURL(), "--bucket", "E", "--key", "metered",
		"--metrics", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--", cmd[0], cmd[1], cmd[2])
	first := e2e.WaitStarts(t, starts, 1)[0]

	leading := `kvelect_election_is_leader{key="metered",name="solo"} 1`
	testenv.Poll(t, fmt.Sprintf("/metrics to say %q", leading), pollTimeout, func() (string, bool) {
		code, body, err := e2e.Get(base + "/metrics")
		if err == nil && code == http.StatusOK && strings.Contains(body, leading) {
			return "", true
		}
		return fmt.Sprintf("%d, %v:\n%s\nlog:\n%s", code, err, body, d.Logged(t)), false
	})
	if code, body, err := e2e.Get(base + "/healthz"); err != nil || code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q %v, want 200 ok", code, body, err)
	}
	wantBuildInfo(t, base)

	d.Cmd.Process.Signal(syscall.SIGTERM)
	if code := d.Wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("election run exited %d after SIGTERM, want the command's status %d", code, 128+int(syscall.SIGTERM))
	}
	e2e.WaitDead(t, first.PID)
	if _, _, err := e2e.Get(base + "/healthz"); err == nil {
		t.Errorf("/healthz still answers after election run exited")
	}
	wantLogged(t, d.Logged(t), "serving /metrics and /healthz")
}

// wantBuildInfo fails the test unless the /metrics of base has
// kvelect_build_info at 1, with the version and the Go version.
func wantBuildInfo(t *testing.T, base string) {
	t.Helper()
	_, body, err := e2e.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^kvelect_build_info\{goversion="go[^"]+",version="[^"]+"\} 1$`)
	if !want.MatchString(body) {
		t.Errorf("/metrics has no kvelect_build_info with a version at 1:\n%s", body)
	}
}

// wantSeries waits until the /metrics of base has the series at want.
func wantSeries(t *testing.T, base, series string, want float64) {
	t.Helper()
	testenv.Poll(t, fmt.Sprintf("%s at %v", series, want), pollTimeout, func() (string, bool) {
		_, body, err := e2e.Get(base + "/metrics")
		v, ok := metricValue(body, series)
		return fmt.Sprintf("%v:\n%s", err, body), ok && v == want
	})
}

// TestDashboardServesObserverMetrics runs election dashboard --metrics and
// scrapes has_leader and leader_changes_seen_total of a key whose leader
// resigns.
func TestDashboardServesObserverMetrics(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "DASHM", TTL: 2 * time.Second})
	elections := candidates(t, url, "DASHM", "job", "node0", "node1")
	waitLeader(t, elections)
	ports, err := embedded.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	d := e2e.StartProcess(t, bin, "dashboard", "dashboard", "-s", url, "--bucket", "DASHM",
		"--listen", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--metrics", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	wantSeries(t, base, `kvelect_election_has_leader{key="job"}`, 1)
	wantSeries(t, base, `kvelect_election_leader_changes_seen_total{key="job"}`, 0)
	wantBuildInfo(t, base)
	if code, body, err := e2e.Get(base + "/healthz"); err != nil || code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q %v, want 200 ok", code, body, err)
	}
	if code, out, errOut := runCLI(t, "resign", "-s", url, "--bucket", "DASHM", "--key", "job"); code != 0 {
		t.Fatalf("resign: exit %d, %s%s", code, out, errOut)
	}
	wantSeries(t, base, `kvelect_election_leader_changes_seen_total{key="job"}`, 1)
	wantSeries(t, base, `kvelect_election_has_leader{key="job"}`, 1)
	d.Cmd.Process.Signal(syscall.SIGTERM)
	if code := d.Wait(t); code != ExitOK {
		t.Errorf("dashboard exited %d after SIGTERM, want 0", code)
	}
}
