//go:build linux

package cli

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// docsLeaseApp returns the shell program of docs/sidecar.md that acts
// while its sidecar's lease lasts, with its sidecar at base and its unit
// of work replaced by a line "UPTIME_MS TOKEN" appended to acts.
func docsLeaseApp(t *testing.T, base, acts string) string {
	t.Helper()
	page, err := os.ReadFile("../../../../docs/sidecar.md")
	if err != nil {
		t.Fatal(err)
	}
	const url, job = "SIDECAR=http://127.0.0.1:4040\n", `./job --fencing-token "$token"`
	for _, block := range strings.Split(string(page), "```sh\n")[1:] {
		script, _, _ := strings.Cut(block, "```")
		if !strings.HasPrefix(script, "#!/bin/sh\n") || !strings.Contains(script, url) || !strings.Contains(script, job) {
			continue
		}
		script = strings.Replace(script, url, "SIDECAR="+base+"\n", 1)
		return strings.Replace(script, job, `echo "$(now_ms) $token" >> `+acts, 1)
	}
	t.Fatalf("docs/sidecar.md has no sh block starting #!/bin/sh with %q and %q", strings.TrimSpace(url), job)
	return ""
}

// leaseApp is the docs' lease-following program, run by /bin/sh, with what
// it did.
type leaseApp struct {
	name string
	acts string // its acts, one "UPTIME_MS TOKEN" line each
	cmd  *exec.Cmd
}

// startLeaseApp runs the docs' program beside the sidecar at base, in a
// process group of its own, killed when the test ends.
func startLeaseApp(t *testing.T, name, base string) *leaseApp {
	t.Helper()
	dir := t.TempDir()
	a := &leaseApp{name: name, acts: filepath.Join(dir, "acts")}
	a.cmd = exec.Command("/bin/sh", "-c", docsLeaseApp(t, base, a.acts))
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	log, err := os.Create(filepath.Join(dir, "app.log"))
	if err != nil {
		t.Fatal(err)
	}
	a.cmd.Stdout, a.cmd.Stderr = log, log
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL) // the program, its follower, curl and jq
		a.cmd.Wait()
		log.Close()
	})
	return a
}

// acted returns the uptime (ms) of each unit of work the program did, and
// the tokens it did them with.
func (a *leaseApp) acted(t *testing.T) (at []int64, tokens map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(a.acts)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	tokens = map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		ms, token, ok := strings.Cut(line, " ")
		n, err := strconv.ParseInt(ms, 10, 64)
		if !ok || err != nil {
			t.Fatalf("%s's program wrote %q, want UPTIME_MS TOKEN", a.name, line)
		}
		at, tokens[token] = append(at, n), true
	}
	return at, tokens
}

// uptimeMS reads /proc/uptime in milliseconds, as the docs' program does.
func uptimeMS(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	up, _, _ := strings.Cut(string(data), " ")
	whole, frac, _ := strings.Cut(up, ".")
	ms, err := strconv.ParseInt(whole+frac+"0", 10, 64)
	if err != nil || len(frac) != 2 {
		t.Fatalf("/proc/uptime %q: want seconds with two decimals", data)
	}
	return ms
}

// TestSidecarLeaseStopsThePausedLeadersApp runs two sidecar processes on
// one key at a 3 s TTL, each with the shell program of docs/sidecar.md
// beside it (curl, jq and dash, polling every 50 ms). The leader's program
// acts on, past several renewals, on the fresh lease each brings. Then the
// leading sidecar is stopped with SIGSTOP: its program stops acting by
// itself, within the lease it last heard (by the work deadline counted from
// the stop), and before the other replica's program starts. Continued, the
// stopped sidecar's first /events message says it does not lead, although
// the last event it sent said it did.
func TestSidecarLeaseStopsThePausedLeadersApp(t *testing.T) {
	for _, tool := range []string{"curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the docs' sidecar program needs %s: %v", tool, err)
		}
	}
	t.Parallel()
	bin := e2e.BuildElection(t)
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	const ttl = 3 * time.Second
	timing := election.TimingFor(ttl, 0)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LEASE", TTL: ttl})

	ports, err := embedded.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	type replica struct {
		name, base string
		sidecar    *e2e.Process
		app        *leaseApp
	}
	var replicas []*replica
	for i, name := range []string{"pod-a", "pod-b"} {
		base := fmt.Sprintf("http://127.0.0.1:%d", ports[i])
		sidecar := e2e.StartProcess(t, bin, name, "sidecar", "--server", url, "--bucket", "LEASE", "--key", "job", "--name", name,
			"--listen", strings.TrimPrefix(base, "http://"), "--log-format", "json")
		replicas = append(replicas, &replica{name: name, base: base, sidecar: sidecar, app: startLeaseApp(t, name, base)})
	}

	leader := testenv.Poll(t, "one program acting", e2e.WaitTimeout, func() (*replica, bool) {
		for _, r := range replicas {
			if at, _ := r.app.acted(t); len(at) > 0 {
				return r, true
			}
		}
		return nil, false
	})
	other := replicas[0]
	if other == leader {
		other = replicas[1]
	}

	// The program acts on through renewals: each brings a fresh lease
	// before the last runs out.
	span := 2*timing.Interval + timing.Validity
	testenv.Poll(t, fmt.Sprintf("%s's program acting for %v", leader.name, span), e2e.WaitTimeout, func() (string, bool) {
		at, _ := leader.app.acted(t)
		return fmt.Sprintf("%d acts", len(at)), len(at) > 0 && at[len(at)-1]-at[0] >= span.Milliseconds()
	})
	at, tokens := leader.app.acted(t)
	for i := 1; i < len(at); i++ {
		if gap := at[i] - at[i-1]; gap > timing.Interval.Milliseconds()/2 {
			t.Errorf("%s's program paused %d ms between two acts while its sidecar led: a lease ran out before the next came", leader.name, gap)
		}
	}
	if len(tokens) != 1 {
		t.Errorf("%s's program acted with tokens %v, want one", leader.name, tokens)
	}
	if acts, _ := other.app.acted(t); len(acts) > 0 {
		t.Fatalf("%s's program acted while %s led", other.name, leader.name)
	}

	if err := leader.sidecar.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := uptimeMS(t)
	continued := false
	t.Cleanup(func() {
		if !continued {
			leader.sidecar.Cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	testenv.Poll(t, other.name+"'s program acting after "+leader.name+"'s sidecar was stopped", e2e.WaitTimeout, func() (int, bool) {
		acts, _ := other.app.acted(t)
		return len(acts), len(acts) > 0
	})
	otherAt, _ := other.app.acted(t)
	at, _ = leader.app.acted(t)
	last, first := at[len(at)-1], otherAt[0]
	t.Logf("%s's sidecar stopped at uptime %d ms; its program's last act %+d ms after, %s's program's first %+d ms after",
		leader.name, stopped, last-stopped, other.name, first-stopped)
	if last >= first {
		t.Errorf("%s's program acted until %d ms, after %s's program started at %d ms", leader.name, last, other.name, first)
	}
	// The lease it last heard came before the stop, and ends at the
	// validity deadline; the delivery and the polling come out of the work
	// margin (192 ms at a 3 s TTL). /proc/uptime counts in 10 ms steps.
	if limit := stopped + timing.WorkDeadline.Milliseconds() + 10; last > limit {
		t.Errorf("%s's program acted %d ms after its sidecar stopped, past the work deadline %v", leader.name, last-stopped, timing.WorkDeadline)
	}

	continued = true
	if err := leader.sidecar.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if v := firstEvent(t, leader.base); v.IsLeader || v.LeaseMS != 0 {
		t.Errorf("the continued sidecar's first /events message %+v: want is_leader false and no lease", v)
	}
	// Its program learns it too, and never acts again.
	code, _, err := e2e.Get(leader.base + "/self")
	if err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("the continued sidecar's /self: %d (%v), want 503", code, err)
	}
	if at, _ := leader.app.acted(t); at[len(at)-1] != last {
		t.Errorf("%s's program acted again after its sidecar continued", leader.name)
	}
}
