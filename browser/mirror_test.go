package browser

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
)

// TestDashboardOverAMirrorSaysSo serves the dashboard with --mirror: the
// page shows the leader the mirror has, under a banner that says it comes
// from a mirror, is not authoritative, and how far behind the bucket the
// mirror is.
func TestDashboardOverAMirrorSaysSo(t *testing.T) {
	browserPath := chromium(t)
	bin := electionBinary(t)
	url, js, _ := serveBucket(t)
	ctx := context.Background()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "DASHM", TTL: 2 * time.Second, Mirror: &jetstream.StreamSource{Name: "DASH"}}); err != nil {
		t.Fatal(err)
	}
	leader := awaitLeader(t, candidate(t, url, "DASH", "scheduler", "node-a"))

	waitCtx, logged := openDashboard(t, browserPath, bin, "-s", url, "--bucket", "DASH", "--mirror", "DASHM")

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
