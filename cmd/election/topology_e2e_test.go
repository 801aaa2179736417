//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	kit "github.com/kvelect/election/internal/topology"
	"github.com/nats-io/nats.go/jetstream"
)

// The tests here run the topologies of docs/topologies.md as a user runs
// them: standalone nats-server processes, built from the module this one
// requires and configured with files, and election run processes whose
// command forks (dash does not exec the last command of sh -c, and here
// sleep is not even last, so the workload is a grandchild of election run).
// A sampler reads /proc every few milliseconds for the workload's sleep
// processes, each carrying its fencing token in its environment, and the
// tests fail if two tokens ever run at once.

// workloads samples the live sleep processes of the commands carrying a
// mark, by fencing token, until the test ends.
type workloads struct {
	mark     string
	mu       sync.Mutex
	live     map[uint64]int // token → pid, at the last sample
	overlaps []string       // samples with two tokens at once
	samples  int
	stop     chan struct{}
	done     chan struct{}
}

// sampleWorkloads starts sampling the sleep processes carrying mark.
func sampleWorkloads(t *testing.T, mark string) *workloads {
	w := &workloads{mark: mark, live: map[uint64]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		close(w.stop)
		<-w.done
		// Whatever election run left behind, nothing outlives the test.
		for pid := range testenv.Marked(mark) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return w
}

func (w *workloads) sample() {
	live := map[uint64]int{}
	for pid, token := range testenv.Marked(w.mark) {
		if testenv.Comm(pid) == "sleep" {
			live[token] = pid
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples++
	w.live = live
	if len(live) > 1 {
		w.overlaps = append(w.overlaps, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), live))
	}
}

// running returns the tokens whose workload runs, at the last sample.
func (w *workloads) running() map[uint64]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.live
}

// awaitRunning waits until a workload of token runs: its start is recorded
// before its sleep starts.
func (w *workloads) awaitRunning(t *testing.T, token uint64) {
	t.Helper()
	testenv.Poll(t, fmt.Sprintf("the workload of token %d to run", token), waitTimeout, func() (map[uint64]int, bool) {
		live := w.running()
		_, runs := live[token]
		return live, runs
	})
}

// awaitGone waits until no workload of token runs.
func (w *workloads) awaitGone(t *testing.T, token uint64) {
	t.Helper()
	testenv.Poll(t, fmt.Sprintf("the workload of token %d to end", token), waitTimeout, func() (map[uint64]int, bool) {
		live := w.running()
		_, runs := live[token]
		return live, !runs
	})
}

// checkNoOverlap fails the test if two workloads ever ran at once.
func (w *workloads) checkNoOverlap(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("%d samples of the workloads", w.samples)
	if len(w.overlaps) > 0 {
		t.Errorf("two workloads ran at once in %d samples: %v", len(w.overlaps), w.overlaps)
	}
}

// workloadCommand returns a command that records its start in starts (as
// recordingCommand does), then runs sleep MARK as a child of the shell,
// and says "end" if that sleep ends.
func workloadCommand(starts, mark string) []string {
	return []string{"sh", "-c", `echo "$KVELECT_LEADER $KVELECT_TOKEN $$ $KVELECT_KEY $KVELECT_BUCKET" >> ` + starts + `; sleep ` + mark + `; echo end`}
}

// candidate starts an election run named name with the workload command.
func candidate(t *testing.T, bin, name, url, bucket string, command []string, extra ...string) *daemon {
	t.Helper()
	args := append([]string{"--server", url, "--bucket", bucket, "--key", "job", "--grace", "1s"}, extra...)
	return startDaemon(t, bin, name, append(append(args, "--"), command...)...)
}

// awaitWatching waits until the election run named name, connected to
// server p, watches the bucket: a consumer of the bucket's stream delivers
// to one of its connection's subscriptions. "campaigning" is logged before
// the watcher exists, and a watcher is a consumer, which only the JetStream
// meta leader creates: were the meta leader's server paused first, the
// candidate would wait for a new meta leader (two 5 s timeouts, seen) before
// it could follow the key.
func awaitWatching(t *testing.T, js jetstream.JetStream, p *kit.Process, name, bucket string) {
	t.Helper()
	testenv.Poll(t, name+" watching bucket "+bucket, waitTimeout, func() (string, bool) {
		var connz struct {
			Conns []struct {
				Name string `json:"name"`
				Subs []struct {
					Subject string `json:"subject"`
				} `json:"subscriptions_list_detail"`
			} `json:"connections"`
		}
		if err := p.Server.Monitor("/connz?subs=detail", &connz); err != nil {
			return err.Error(), false
		}
		subscribed := map[string]bool{}
		for _, c := range connz.Conns {
			if c.Name == "election run "+name {
				for _, sub := range c.Subs {
					subscribed[sub.Subject] = true
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		stream, err := js.Stream(ctx, "KV_"+bucket)
		if err != nil {
			return err.Error(), false
		}
		consumers := stream.ListConsumers(ctx)
		var delivers []string
		watching := false
		for info := range consumers.Info() { // read to the end: the lister blocks until then
			watching = watching || subscribed[info.Config.DeliverSubject]
			delivers = append(delivers, info.Config.DeliverSubject)
		}
		return fmt.Sprintf("consumers deliver to %v, %s subscribes to %v (%v)", delivers, name, subscribed, consumers.Err()), watching
	})
}

// TestSuperclusterPlacementAndFailover runs three one-server clusters C1,
// C2 and C3 joined by gateways. A client of C3 creates the bucket with
// --cluster C1: it lives in C1, and bucket check says so. Candidates of C2
// and C3 campaign; the leader's election run is SIGKILLed: its command dies
// with it and the other takes over. Then a candidate of C1 joins, and the
// server of the leader (in C2 or C3, not the home region) is paused with
// SIGSTOP: its leader stands down by its own clock, and C1's candidate takes
// over. Pausing C1's server instead would stop every election, wherever its
// candidates: C1 holds the bucket (docs/topologies.md, "Where to put the
// bucket"). Two workloads never run at once.
func TestSuperclusterPlacementAndFailover(t *testing.T) {
	t.Parallel()
	bin := buildElection(t)
	// Three one-server clusters, each server named after its region and
	// tagged with it, linked straight to each other.
	topo, err := kit.Supercluster([]int{1, 1, 1}, kit.Options{Dir: t.TempDir(), Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range topo.Servers {
		s.Name, s.Tags = s.Region, []string{"region:" + s.Region}
	}
	servers := e2e.StartNATSServers(t, topo)

	c3 := servers["C3"].Server.ClientURL()
	code, stdout, stderr := runCLI(t, "bucket", "create", "-s", c3, "--bucket", "HOME", "--ttl", "2s", "--cluster", "C1")
	if code != 0 {
		t.Fatalf("bucket create --cluster C1 through C3: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("election bucket create -s <C3> --bucket HOME --ttl 2s --cluster C1:\n%s", stdout)
	code, stdout, stderr = runCLI(t, "bucket", "check", "-s", c3, "--bucket", "HOME")
	t.Logf("election bucket check -s <C3> --bucket HOME:\n%s", stdout)
	if code != 0 {
		t.Fatalf("bucket check through C3: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, says := range []string{
		"location: cluster C1, stream leader C1, no other replicas; placed by cluster \"C1\"\n",
		"location: this client is connected to cluster C3: candidates connected to cluster C3 lead only while cluster C1 is reachable\n",
	} {
		if !strings.Contains(stdout, says) {
			t.Errorf("bucket check does not say %q", says)
		}
	}
	// The server agrees, for the bucket and for its leadership history,
	// which follows the bucket to its home region.
	_, js := testenv.Connect(t, c3)
	for _, stream := range []string{"KV_HOME", "KVELECT_HISTORY_HOME"} {
		s, err := js.Stream(context.Background(), stream)
		if err != nil {
			t.Fatal(err)
		}
		if c := s.CachedInfo().Cluster; c == nil || c.Name != "C1" {
			t.Errorf("stream %s lives in %+v, want cluster C1", stream, c)
		}
	}
	code, stdout, stderr = runCLI(t, "bucket", "create", "-s", c3, "--bucket", "HOME", "--cluster", "C2")
	wantOneLineError(t, code, exitError, stdout, stderr, `bucket "HOME" exists with cluster C1, not --cluster C2; it is left as it is`)
	code, stdout, stderr = runCLI(t, "bucket", "create", "-s", c3, "--bucket", "TAGGED", "--ttl", "2s", "--history", "0", "--tags", "region:C2")
	if code != 0 || !strings.Contains(stdout, "location: cluster C2, stream leader C2, no other replicas; placed by servers tagged region:C2\n") {
		t.Errorf("bucket create --tags region:C2 through C3: exit %d, stdout %q, stderr %q; want it in C2", code, stdout, stderr)
	}
	for _, placement := range [][]string{{"--cluster", "C9"}, {"--cluster", "C1", "--tags", "region:C2"}} {
		code, stdout, stderr = runCLI(t, append([]string{"bucket", "create", "-s", c3, "--bucket", "NOWHERE", "--history", "0"}, placement...)...)
		t.Logf("bucket create %v: %s", placement, stderr)
		wantOneLineError(t, code, exitError, stdout, stderr, "the server refused bucket \"NOWHERE\": ", "no server matches the placement")
	}

	mark := testenv.NewMark()
	work := sampleWorkloads(t, mark)
	starts := filepath.Join(t.TempDir(), "starts")
	command := workloadCommand(starts, mark)
	daemons := map[string]*daemon{}
	for _, region := range []string{"C2", "C3"} {
		daemons[region] = candidate(t, bin, region, servers[region].Server.ClientURL(), "HOME", command)
	}

	first := waitStarts(t, starts, 1)[0]
	other := map[string]string{"C2": "C3", "C3": "C2"}[first.name]
	if other == "" {
		t.Fatalf("first start %+v: want C2's or C3's candidate", first)
	}
	work.awaitRunning(t, first.token)
	daemons[first.name].cmd.Process.Kill()
	daemons[first.name].wait(t)
	work.awaitGone(t, first.token)
	waitDead(t, first.pid)
	second := waitStarts(t, starts, 2)[1]
	if second.name != other || second.token <= first.token {
		t.Fatalf("after killing %s's election run (token %d), the command started on %s with token %d; want %s, a larger token",
			first.name, first.token, second.name, second.token, other)
	}

	work.awaitRunning(t, second.token)
	daemons["C1"] = candidate(t, bin, "C1", servers["C1"].Server.ClientURL(), "HOME", command)
	awaitWatching(t, js, servers["C1"], "C1", "HOME")
	paused := servers[second.name]
	if err := paused.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { paused.Signal(syscall.SIGCONT) })
	pausedAt := time.Now()
	work.awaitGone(t, second.token)
	t.Logf("%s's workload ended %v after its server was paused", second.name, time.Since(pausedAt).Round(time.Millisecond))
	third := waitStarts(t, starts, 3)[2]
	if third.name != "C1" || third.token <= second.token {
		t.Fatalf("after pausing %s's server (token %d), the command started on %s with token %d; want C1, a larger token",
			second.name, second.token, third.name, third.token)
	}
	t.Logf("C1 led %v after %s's server was paused", time.Since(pausedAt).Round(time.Millisecond), second.name)
	if err := paused.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if all := parseStarts(mustRead(t, starts)); len(all) != 3 {
		t.Errorf("the command started %d times, want 3: %+v", len(all), all)
	}
	work.checkNoOverlap(t)
}

// TestLeafNodeCandidateOfTheHubsBucket runs a hub (JetStream domain hub)
// and a leaf node (domain leaf, ping_interval 1s) as standalone servers,
// with the bucket in the hub. A candidate connected to the leaf with
// --js-domain hub leads; the leaf server is killed; the hub's candidate
// takes over, and two workloads never run at once. It also checks what
// bucket check says through the leaf, and the error for a domain that
// does not exist.
func TestLeafNodeCandidateOfTheHubsBucket(t *testing.T) {
	t.Parallel()
	bin := buildElection(t)
	topo, err := kit.Leaf(kit.Options{Dir: t.TempDir(), Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	topo.Server("leaf").PingInterval = time.Second
	servers := e2e.StartNATSServers(t, topo)
	hub, leaf := servers["hub"], servers["leaf"]

	code, stdout, stderr := runCLI(t, "bucket", "create", "-s", hub.Server.ClientURL(), "--bucket", "GLOBAL", "--ttl", "2s")
	if code != 0 {
		t.Fatalf("bucket create on the hub: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "bucket", "check", "-s", leaf.Server.ClientURL(), "--js-domain", "hub", "--bucket", "GLOBAL")
	t.Logf("election bucket check -s <leaf> --js-domain hub --bucket GLOBAL:\n%s", stdout)
	if code != 0 || !strings.Contains(stdout, "location: JetStream domain hub: candidates that reach the bucket through this domain lead only while it is reachable from their server\n") {
		t.Errorf("bucket check through the leaf: exit %d, stdout %q, stderr %q; want 0 and the domain", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "bucket", "check", "-s", leaf.Server.ClientURL(), "--js-domain", "nowhere", "--bucket", "GLOBAL")
	wantOneLineError(t, code, exitError, stdout, stderr, `JetStream domain "nowhere" cannot be reached from this server`)

	mark := testenv.NewMark()
	work := sampleWorkloads(t, mark)
	starts := filepath.Join(t.TempDir(), "starts")
	command := workloadCommand(starts, mark)
	candidate(t, bin, "edge", leaf.Server.ClientURL(), "GLOBAL", command, "--js-domain", "hub")
	first := waitStarts(t, starts, 1)[0]
	if first.name != "edge" {
		t.Fatalf("first start %+v: want the leaf's candidate, edge", first)
	}
	work.awaitRunning(t, first.token)
	candidate(t, bin, "central", hub.Server.ClientURL(), "GLOBAL", command)
	_, hubJS := testenv.Connect(t, hub.Server.ClientURL())
	awaitWatching(t, hubJS, hub, "central", "GLOBAL")

	leaf.Kill()
	killedAt := time.Now()
	work.awaitGone(t, first.token)
	t.Logf("edge's workload ended %v after the leaf server was killed", time.Since(killedAt).Round(time.Millisecond))
	second := waitStarts(t, starts, 2)[1]
	if second.name != "central" || second.token <= first.token {
		t.Fatalf("after killing the leaf server (token %d), the command started on %s with token %d; want central, a larger token",
			first.token, second.name, second.token)
	}
	t.Logf("central led %v after the leaf server was killed", time.Since(killedAt).Round(time.Millisecond))
	work.checkNoOverlap(t)
}

func mustRead(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
