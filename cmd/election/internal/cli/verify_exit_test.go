package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestVerifyAnUnusableBucketIsCritical: a bucket whose keys never expire
// (no TTL) is CRITICAL, exit 2, in text and in JSON, naming the problem.
func TestVerifyAnUnusableBucketIsCritical(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "FOREVER"})

	code, stdout, stderr := runCLI(t, "verify", "-s", s.ClientURL(), "--bucket", "FOREVER", "--duration", "500ms", "--samples", "5")
	t.Logf("election verify --bucket FOREVER:\n%s", stdout)
	if code != checkCritical || stderr != "" {
		t.Errorf("exit %d, stderr %q; want %d", code, stderr, checkCritical)
	}
	if !strings.HasPrefix(stdout, "election verify FOREVER: CRITICAL\n") ||
		!strings.Contains(stdout, "\n  critical: bucket FOREVER is unusable for elections: no TTL, so a crashed leader's key never expires") {
		t.Errorf("verify's output:\n%s\nwant CRITICAL, saying the bucket has no TTL", stdout)
	}

	code, stdout, _ = runCLI(t, "verify", "-s", s.ClientURL(), "--bucket", "FOREVER", "--duration", "500ms", "--samples", "5", "--json")
	var r verifyReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != checkCritical || r.Status != "CRITICAL" || r.Code != checkCritical || len(r.Criticals) != 1 {
		t.Errorf("verify --json: exit %d, %v, status %q code %d criticals %q; want CRITICAL, 2, one critical:\n%s", code, err, r.Status, r.Code, r.Criticals, stdout)
	}
}

// verdictOf finishes r and returns its exit status and text.
func verdictOf(r *verifyReport) (int, string) {
	r.finish()
	var out bytes.Buffer
	printVerify(&out, r)
	return r.Code, out.String()
}

// TestVerifyCriticalFindings: each measurement beyond what the election
// assumes makes verify CRITICAL (exit 2) with a line saying so: the
// bucket's servers' clocks further apart than ServerClockOffset, this
// host's clock rate beyond ClockRate, a probe key gone before the
// earliest expiry, and no safe TTL. Just inside each bound it is a
// warning, or nothing. The measurements are given, as a cluster with a
// server's clock 150 ms off, a host's clock 6% fast or a server that ages
// keys out early would give them: this test cannot make real servers' or
// this host's clocks wrong.
func TestVerifyCriticalFindings(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Second
	timing := election.TimingFor(ttl, 0)
	servers := []string{"v1", "v2", "v3"}
	clocks := func(v2 time.Duration) serverClocks {
		return serverClocks{Via: "a test", Servers: []serverClock{
			{Name: "v1", Offset: 0, Error: time.Millisecond},
			{Name: "v2", Offset: v2, Error: time.Millisecond},
			{Name: "v3", Offset: 10 * time.Millisecond, Error: time.Millisecond},
		}}
	}
	// rate gives nine stream info answers a second apart on this host's
	// clock, from one stream leader whose clock advances 1/rate as much.
	rate := func(rate float64) streamSamples {
		start, stamp0 := time.Now(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var s streamSamples
		for i := range 9 {
			local := time.Duration(i) * time.Second
			s.stream = append(s.stream, streamSample{sent: start.Add(local), rtt: time.Millisecond, leader: "v1",
				stamp: stamp0.Add(time.Duration(float64(local+time.Millisecond/2) / rate))})
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		measure func(r *verifyReport)
		code    int
		says    string // the critical or warning line, after its label
	}{
		{"servers' clocks 150ms apart", func(r *verifyReport) { describeClocks(r, clocks(150*time.Millisecond), "v1", servers) },
			checkCritical, "critical: v2's clock is 150.000ms ±2.000ms ahead of v1's, beyond the 100ms the election assumes between the bucket's servers"},
		{"servers' clocks 80ms apart", func(r *verifyReport) { describeClocks(r, clocks(80*time.Millisecond), "v1", servers) },
			checkWarning, "warning: v2's clock is 80.000ms ±2.000ms ahead of v1's, past half the 100ms"},
		{"servers' clocks 40ms apart", func(r *verifyReport) { describeClocks(r, clocks(40*time.Millisecond), "v1", servers) },
			checkOK, ""},
		{"this host's clock 6% fast", func(r *verifyReport) { describeRate(r, rate(1.06)) },
			checkCritical, "critical: this host's clock runs +60000 ppm ±"},
		{"this host's clock 6% slow", func(r *verifyReport) { describeRate(r, rate(0.94)) },
			checkCritical, "critical: this host's clock runs -60000 ppm ±"},
		{"this host's clock 3% fast", func(r *verifyReport) { describeRate(r, rate(1.03)) },
			checkWarning, "warning: this host's clock runs +30000 ppm ±"},
		{"a probe key gone before the earliest expiry", func(r *verifyReport) {
			early := ttl - timing.EarliestExpiry + 50*time.Millisecond
			describeLag(r, expiryLag{Lag: msOf(-early), Error: msOf(10 * time.Millisecond)}, ttl, timing)
		}, checkCritical, "critical: the probe key was gone 373.333ms before its TTL, before the earliest expiry 4.667s the election assumes"},
		{"a probe key gone early, within the assumption", func(r *verifyReport) {
			describeLag(r, expiryLag{Lag: msOf(-100 * time.Millisecond), Error: msOf(10 * time.Millisecond)}, ttl, timing)
		}, checkWarning, "warning: the probe key was gone 90.000ms before its TTL, within what the election assumes"},
		{"no safe TTL", func(r *verifyReport) { concludeTTL(r, ttl, election.MaxTTL, "a test", serverOffset{}, 3) },
			checkCritical, "critical: no TTL up to 1h0m0s is safe with renewals of 3600000.000ms at p99"},
		{"a safe TTL", func(r *verifyReport) { concludeTTL(r, ttl, 5*time.Millisecond, "a test", serverOffset{}, 1) },
			checkOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &verifyReport{Bucket: "B"}
			tc.measure(r)
			code, out := verdictOf(r)
			status := checkStatusNames[tc.code]
			if code != tc.code || !strings.HasPrefix(out, "election verify B: "+status+"\n") || tc.says != "" && !strings.Contains(out, "\n  "+tc.says) {
				t.Errorf("exit %d:\n%s\nwant %d, %s, saying %q", code, out, tc.code, status, tc.says)
			}
		})
	}
}

// TestVerifyAProbeKeyGoneEarlyIsCritical: with --write, a probe key that
// is gone long before its TTL (here deleted right after verify's last
// update, as a server whose clock runs far ahead would age it out) is
// CRITICAL, exit 2: gone before the earliest expiry the election assumes.
func TestVerifyAProbeKeyGoneEarlyIsCritical(t *testing.T) {
	t.Parallel()
	const samples = 5
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "EARLY", TTL: 5 * time.Second})
	stream, err := js.Stream(t.Context(), "KV_EARLY")
	if err != nil {
		t.Fatal(err)
	}
	deleted := make(chan error, 1)
	go func() {
		// The probe key's creation and its updates are the bucket's
		// first messages: delete the key after the last. The stream's
		// state is read, not watched: a watcher's delivery may lag behind
		// verify's read under load.
		poll := time.NewTicker(2 * time.Millisecond)
		defer poll.Stop()
		for range poll.C {
			info, err := stream.Info(t.Context())
			if err != nil {
				deleted <- err
				return
			}
			if info.State.LastSeq < samples+1 {
				continue
			}
			last, err := stream.GetMsg(t.Context(), samples+1)
			if err != nil {
				deleted <- err
				return
			}
			deleted <- kv.Delete(t.Context(), strings.TrimPrefix(last.Subject, "$KV.EARLY."))
			return
		}
	}()
	code, stdout, stderr := runCLI(t, "verify", "-s", s.ClientURL(), "--bucket", "EARLY", "--duration", "500ms", "--samples", "5", "--write")
	t.Logf("election verify --bucket EARLY --write, its probe key deleted after its last update:\n%s", stdout)
	select {
	case err := <-deleted:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("the probe key was never deleted")
	}
	if code != checkCritical || stderr != "" || !strings.Contains(stdout, "the election assumes: a server's clock runs ahead or fast") {
		t.Errorf("exit %d, stderr %q; want %d, the probe key gone before the earliest expiry", code, stderr, checkCritical)
	}
}
