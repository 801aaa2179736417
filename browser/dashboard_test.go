package browser

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// timeout bounds every wait of the test; it is not a speed requirement.
const timeout = time.Minute

// chromium finds the browser: $CHROMIUM, or chromium on the PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if path := os.Getenv("CHROMIUM"); path != "" {
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatal("no Chromium: install it (apt-get install chromium) or set CHROMIUM to a Chrome or Chromium binary")
	return ""
}

// candidate runs an election for key until the test ends, on a connection
// of its own, as another process would.
func candidate(t *testing.T, url, bucket, key, name string) *election.Election {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	history, err := history.Open(context.Background(), js, bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := election.NewElection(context.Background(), name, key, kv, election.WithoutSplay(), election.WithEventHook(history.Record))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); e.Start(context.Background()) }()
	t.Cleanup(func() {
		e.Stop()
		<-done
		nc.Close()
	})
	return e
}

func awaitLeader(t *testing.T, elections ...*election.Election) *election.Election {
	t.Helper()
	return testenv.Poll(t, "a leader", timeout, func() (*election.Election, bool) {
		for _, e := range elections {
			if e.IsLeader() {
				return e, true
			}
		}
		return nil, false
	})
}

// electionBinary builds the election command, in the library's module with
// its dependencies, and returns the binary's path.
func electionBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "election")
	build := exec.Command("go", "build", "-o", bin, "./cmd/election")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// serveBucket starts a NATS server for the test with the election bucket
// DASH (keys expiring after 2s) and its history, and returns the server's
// URL, a JetStream connection to it and the bucket.
func serveBucket(t *testing.T) (string, jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	s, err := embedded.Server(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { embedded.Shutdown(s) })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "DASH", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := history.Create(ctx, js, "DASH", 0); err != nil {
		t.Fatal(err)
	}
	return s.ClientURL(), js, kv
}

// openDashboard runs bin's dashboard with flags (which name the server and
// the bucket) on a free port until the test ends, waits until it serves,
// and loads its page in a headless browserPath. It returns the page's
// context, each wait on it bounded by timeout, and what the dashboard has
// logged, for failures.
func openDashboard(t *testing.T, browserPath, bin string, flags ...string) (context.Context, *strings.Builder) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dash := exec.Command(bin, append([]string{"dashboard", "--listen", addr}, flags...)...)
	dash.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "NATS_URL=", "NATS_CONTEXT=")
	logged := new(strings.Builder)
	dash.Stderr = logged
	if err := dash.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dash.Process.Signal(os.Interrupt)
		dash.Wait()
	})
	page := "http://" + addr + "/"
	testenv.Eventually(t, "the dashboard serving "+page, timeout, func() bool {
		res, err := http.Get(page)
		if err == nil {
			res.Body.Close()
		}
		return err == nil
	})

	allocCtx, cancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browserPath), chromedp.NoSandbox, chromedp.WindowSize(1280, 800))...)
	t.Cleanup(cancel)
	browserCtx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	if err := chromedp.Do(browserCtx, chromedp.Navigate(page)); err != nil { // the first call starts the browser: no timeout on it
		t.Fatalf("loading the page: %v", err)
	}
	waitCtx, cancel := context.WithTimeout(browserCtx, timeout)
	t.Cleanup(cancel)
	return waitCtx, logged
}

// TestDashboardInAHeadlessBrowser loads the dashboard in Chromium: it lists
// the keys with their leaders and the tokens the history recorded, shows a
// transfer without a reload, draws a key's holders on its timeline, and
// shows the fleet's nodes and daemons (not as keys), a daemon that runs
// nowhere standing out.
func TestDashboardInAHeadlessBrowser(t *testing.T) {
	browserPath := chromium(t)
	bin := electionBinary(t)
	url, _, kv := serveBucket(t)
	ctx := context.Background()
	a, b := candidate(t, url, "DASH", "scheduler", "node-a"), candidate(t, url, "DASH", "scheduler", "node-b")
	c := candidate(t, url, "DASH", "compactor", "node-c")
	first := awaitLeader(t, a, b)
	other := a
	if first == a {
		other = b
	}
	compactor := awaitLeader(t, c)

	// A fleet: a node that runs relay, and a member that lists a daemon it
	// never claims, so that orphan runs nowhere.
	fleetBucket, err := election.OpenBucket(ctx, kv, election.WithoutSplay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleetBucket.Close)
	node, err := fleet.Join(ctx, fleetBucket, fleet.Config{Name: "node-f", Capacity: 2, Labels: map[string]string{"zone": "eu-1"},
		Daemons: []fleet.Daemon{{Name: "relay", Run: func(ctx context.Context) error { <-ctx.Done(); return nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Leave)
	ghost, err := election.NewElection(ctx, "ghost", "fleet.node.ghost", kv, election.WithoutSplay(),
		election.WithMetadata(map[string]string{"capacity": "1", "daemons": "orphan"}))
	if err != nil {
		t.Fatal(err)
	}
	ghostDone := make(chan struct{})
	go func() { defer close(ghostDone); ghost.Start(ctx) }()
	t.Cleanup(func() { ghost.Stop(); <-ghostDone })
	awaitLeader(t, ghost)

	waitCtx, logged := openDashboard(t, browserPath, bin, "-s", url, "--bucket", "DASH")

	row := func(key string) string { return fmt.Sprintf(`#keys tbody tr[data-key=%q]`, key) }
	leaderCell := func(key string) string { return row(key) + " td:nth-child(2)" }
	if err := chromedp.Do(waitCtx, chromedp.WaitVisible(row("scheduler")), chromedp.WaitVisible(row("compactor"))); err != nil {
		t.Fatalf("the page did not list the keys: %v\n%s", err, logged.String())
	}
	leader, err := chromedp.Run(waitCtx, chromedp.Text(leaderCell("scheduler")))
	if err != nil {
		t.Fatal(err)
	}
	rangeText, err := chromedp.Run(waitCtx, chromedp.Text("#range"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(leader) != first.Name() || strings.TrimSpace(rangeText) != "1–2 of 2" {
		t.Errorf("the page shows %q leading the scheduler, keys %q; want %s, 1–2 of 2", leader, rangeText, first.Name())
	}
	// Both led before the dashboard started: their tokens and starts come from the history.
	tokenShown := fmt.Sprintf(`document.querySelector(%q).textContent === %q`, row("compactor")+" td:nth-child(3)", fmt.Sprint(compactor.Token()))
	if _, err := chromedp.Run(waitCtx, chromedp.Poll[bool](tokenShown)); err != nil {
		text, _ := chromedp.Run(waitCtx, chromedp.Text(row("compactor")))
		t.Errorf("the compactor's row %q does not show its token %d from the history: %v", text, compactor.Token(), err)
	}
	since, err := chromedp.Run(waitCtx, chromedp.Text(row("compactor")+" td:nth-child(4)"))
	if err != nil || strings.HasPrefix(since, "before") || since == "–" {
		t.Errorf("the compactor's since %q (%v): want the time of its win", since, err)
	}
	// A moment of today shows as its time of day; one of another day, with
	// its date: a leader since yesterday must not read as since this morning.
	type moments struct{ Since, Today, Yesterday, YesterdaysDate, TodaysDate string }
	m, err := chromedp.Run(waitCtx, chromedp.Evaluate[moments](fmt.Sprintf(`(() => {
		const y = new Date(Date.now() - 36 * 3600 * 1000);
		return {Since: %q, Today: when(new Date().toISOString()), Yesterday: when(y.toISOString()),
			YesterdaysDate: y.toLocaleDateString(), TodaysDate: new Date().toLocaleDateString()};
	})()`, since)))
	t.Logf("since %q; a moment of today: %q; 36 h ago: %q", m.Since, m.Today, m.Yesterday)
	if err != nil || !strings.Contains(m.Yesterday, m.YesterdaysDate) || strings.Contains(m.Today, m.TodaysDate) || strings.Contains(m.Since, m.TodaysDate) {
		t.Errorf("moments shown %+v (%v): want the date with a moment 36 h ago, and none with today's (the compactor's since included)", m, err)
	}

	// The fleet: its nodes and daemons, orphan standing out.
	daemonRow := func(name string) string { return fmt.Sprintf(`#daemons tbody tr[data-daemon=%q]`, name) }
	if err := chromedp.Do(waitCtx, chromedp.WaitVisible(daemonRow("orphan")), chromedp.WaitVisible(`#nodes tbody tr[data-node="node-f"]`)); err != nil {
		t.Fatalf("the page did not show the fleet: %v", err)
	}
	if _, err := chromedp.Run(waitCtx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q).textContent.includes("node-f")`, daemonRow("relay")))); err != nil {
		t.Errorf("relay is not shown running on node-f: %v", err)
	}
	nowhere, err := chromedp.Run(waitCtx, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q).classList.contains("nowhere")`, daemonRow("orphan"))))
	if err != nil || !nowhere {
		t.Errorf("orphan, which runs nowhere, does not stand out (%v)", err)
	}
	if summary, err := chromedp.Run(waitCtx, chromedp.Text("#fleet-summary")); err != nil || !strings.Contains(summary, "1 running nowhere") {
		t.Errorf("the fleet's summary %q (%v): want it to count the daemon running nowhere", summary, err)
	}
	nodeText, err := chromedp.Run(waitCtx, chromedp.Text(`#nodes tbody tr[data-node="node-f"]`))
	if err != nil || !strings.Contains(nodeText, "zone=eu-1") {
		t.Errorf("node-f's row %q (%v): want its label", nodeText, err)
	}

	if _, err := chromedp.Run(waitCtx, chromedp.Evaluate[bool](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}

	bucket, err := election.OpenBucket(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	won, err := bucket.Transfer(ctx, "scheduler", other.Name())
	if err != nil {
		t.Fatal(err)
	}
	shown := fmt.Sprintf(`document.querySelector(%q).textContent === %q`, leaderCell("scheduler"), other.Name())
	if _, err := chromedp.Run(waitCtx, chromedp.Poll[bool](shown, chromedp.WithPollingInterval(5*time.Millisecond))); err != nil {
		t.Fatalf("the page did not show the transfer to %s: %v", other.Name(), err)
	}
	t.Logf("the page showed the new leader %v after its claim reached the server", time.Since(won.Written).Round(time.Millisecond))
	// The list of changes grows only from the stream of changes.
	streamed := fmt.Sprintf(`[...document.querySelectorAll("#changes li")].some((li) => li.textContent.includes(%q))`, "scheduler: "+other.Name())
	if _, err := chromedp.Run(waitCtx, chromedp.Poll[bool](streamed)); err != nil {
		t.Errorf("the transfer did not arrive in the list of changes: %v", err)
	}
	if still, err := chromedp.Run(waitCtx, chromedp.Evaluate[bool](`window.notReloaded === true`)); err != nil || !still {
		t.Errorf("the page reloaded to show the transfer (%v)", err)
	}

	if err := chromedp.Do(waitCtx, chromedp.Click(row("scheduler"))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(waitCtx, chromedp.Poll[bool](`document.querySelectorAll("#timeline rect.held").length >= 2`)); err != nil {
		t.Fatalf("the timeline did not draw the two holders: %v", err)
	}
	holders, err := chromedp.Run(waitCtx, chromedp.Evaluate[int](`document.querySelectorAll("#timeline rect.held").length`))
	if err != nil {
		t.Fatal(err)
	}
	if file := os.Getenv("KVELECT_SCREENSHOT"); file != "" {
		png, err := chromedp.Run(waitCtx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the page lists 2 keys and the fleet, showed the transfer live, and drew %d leaderships", holders)
}
