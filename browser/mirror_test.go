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
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestDashboardOverAMirrorSaysSo serves the dashboard with --mirror: the
// page shows the leader the mirror has, under a banner that says it comes
// from a mirror, is not authoritative, and how far behind the bucket the
// mirror is.
func TestDashboardOverAMirrorSaysSo(t *testing.T) {
	browserPath := chromium(t)
	bin := filepath.Join(t.TempDir(), "election")
	build := exec.Command("go", "build", "-o", bin, "./cmd/election")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
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
	if _, err := election.CreateBucket(ctx, js, election.BucketConfig{Name: "DASH", TTL: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := history.Create(ctx, js, "DASH", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "DASHM", TTL: 2 * time.Second, Mirror: &jetstream.StreamSource{Name: "DASH"}}); err != nil {
		t.Fatal(err)
	}
	leader := awaitLeader(t, candidate(t, s.ClientURL(), "DASH", "scheduler", "node-a"))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dash := exec.Command(bin, "dashboard", "--listen", addr, "-s", s.ClientURL(), "--bucket", "DASH", "--mirror", "DASHM")
	dash.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "NATS_URL=", "NATS_CONTEXT=")
	var logged strings.Builder
	dash.Stderr = &logged
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

	allocCtx, cancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browserPath), chromedp.NoSandbox, chromedp.WindowSize(1280, 800))...)
	defer cancel()
	browserCtx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	if err := chromedp.Do(browserCtx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	waitCtx, cancel := context.WithTimeout(browserCtx, timeout)
	defer cancel()

	leaderShown := fmt.Sprintf(`document.querySelector('#keys tbody tr[data-key="scheduler"] td:nth-child(2)')?.textContent === %q`, leader.Name())
	if _, err := chromedp.Run(waitCtx, chromedp.Poll[bool](leaderShown)); err != nil {
		t.Fatalf("the page over the mirror did not show the scheduler's leader %s: %v\n%s", leader.Name(), err, logged.String())
	}
	if err := chromedp.Do(waitCtx, chromedp.WaitVisible("#mirror")); err != nil {
		t.Fatalf("the mirror's banner is not shown: %v", err)
	}
	banner, err := chromedp.Run(waitCtx, chromedp.Text("#mirror"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(banner, "from mirror DASHM of bucket DASH: not authoritative, may be stale; lag ") || !strings.Contains(banner, "heard from bucket DASH") {
		t.Errorf("the banner says %q; want where the page comes from, that it is not authoritative, and the mirror's lag", banner)
	}
}
