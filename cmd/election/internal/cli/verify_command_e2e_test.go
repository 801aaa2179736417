//go:build linux

package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	kit "github.com/kvelect/election/internal/topology"
)

// startVerifyCluster starts a standalone cluster of three nats-server
// processes, v1 to v3, of the cluster verify, and returns the client URL of
// the first. Account APP has JetStream and two users, app (any subject) and
// limited (no $SYS subject); account SYS is the system account, with its
// user sys; all log in with the password secret.
func startVerifyCluster(t *testing.T) string {
	t.Helper()
	topo, err := kit.Cluster("verify", 3, kit.Options{Dir: t.TempDir(), Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range topo.Servers {
		s.Name = fmt.Sprintf("v%d", i+1)
		s.Accounts = []kit.Account{
			{Name: "APP", JetStream: true, Users: []kit.User{
				{Name: "app", Password: secret},
				{Name: "limited", Password: secret, DenyPublish: []string{"$SYS.>"}},
			}},
			{Name: "SYS", Users: []kit.User{{Name: "sys", Password: secret}}},
		}
		s.SystemAccount = "SYS"
	}
	e2e.StartNATSServers(t, topo)
	return topo.Servers[0].ClientURL()
}

// asVerifyUser runs election args as user of the verify cluster at url.
func asVerifyUser(t *testing.T, url, user string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	code, stdout, stderr = runCLI(t, append(args, "-s", url, "--user", user, "--password", secret)...)
	if strings.Contains(stdout+stderr, secret) {
		t.Errorf("election %s printed the password:\n%s%s", strings.Join(args, " "), stdout, stderr)
	}
	return code, stdout, stderr
}

// TestVerifyOnAStandaloneCluster runs election verify against a standalone
// cluster of three servers and an R3 bucket at TTL 5 s: in text it prints
// the stream's replicas, the round trips, every server's clock and their
// spread, this host's clock rate, whether the TTL rides out a
// stream-leader election (it does not: WARNING) and the smallest safe and
// recommended TTLs; in JSON, with --write and --step-down, also the
// updates' round trips, the key expiry lag and the step-down. A user who
// may not publish to $SYS subjects is told how to have the clocks read,
// and with --system-context naming a system-account user they are read
// (by bucket check too).
func TestVerifyOnAStandaloneCluster(t *testing.T) {
	t.Parallel()
	timing := election.TimingFor(5*time.Second, 0)
	url := startVerifyCluster(t)
	created := testenv.Poll(t, "the cluster taking an R3 bucket", e2e.WaitTimeout, func() (string, bool) {
		code, stdout, stderr := asVerifyUser(t, url, "app", "bucket", "create", "--bucket", "V", "--ttl", "5s", "--replicas", "3", "--history", "0")
		return stdout + stderr, code == ExitOK
	})
	// bucket create warns that the TTL does not ride out a stream-leader
	// election, with the figures.
	t.Logf("election bucket create --bucket V --ttl 5s --replicas 3:\n%s", created)
	if want := `(?m)^warning: a stream-leader election on this R3 bucket \(4–9s after its leader's server crashes, measured on nats-server [0-9.]+\) ` +
		`outlasts a leader's validity at TTL 5s \(` + regexp.QuoteMeta(timing.Validity.Round(time.Millisecond).String()) + ` after its last renewal, at the default interval\): ` +
		`such a crash costs the leadership; at a TTL of 11s or more a leader rides out one that starts early enough in its renewal cycle$`; !regexp.MustCompile(want).MatchString(created) {
		t.Errorf("bucket create --replicas 3 --ttl 5s does not warn of a stream-leader election (%s):\n%s", want, created)
	}

	code, stdout, stderr := asVerifyUser(t, url, "app", "verify", "--bucket", "V", "--duration", "2s")
	t.Logf("election verify --bucket V --duration 2s:\n%s", stdout)
	if code != checkWarning || stderr != "" {
		t.Errorf("verify: exit %d, stderr %q; want %d (the TTL does not ride out a stream-leader election)", code, stderr, checkWarning)
	}
	for _, want := range []string{
		`(?m)^election verify V: WARNING$`,
		`(?m)^  bucket V: TTL 5s, 3 replicas, file storage, cluster verify$`,
		`(?m)^  stream KV_V: leader v\d(, v\d current \(seen [^)]+\)){2}$`,
		`(?m)^  round trips of stream info requests, answered by the stream leader: median [0-9.]+ms, p99 [0-9.]+ms \(20 samples\)$`,
		`(?m)^  round trips of PING of the connected server v1: median [0-9.]+ms, p99 [0-9.]+ms \(20 samples\)$`,
		`(?m)^  server clocks, less this host's, read through this user's account, \$SYS\.REQ\.SERVER\.PING\.CONNZ: v1 [-+][0-9.]+ms ±[0-9.]+ms( \(stream leader\))?, v2 .*, v3 .*$`,
		`(?m)^  the bucket's servers' clocks: within [0-9.]+ms ±[0-9.]+ms of each other \(v\d ahead of v\d\); the election assumes 100ms$`,
		`(?m)^  this host's clock rate against v\d's \(the stream leader\): [-+]\d+ ppm ±\d+ ppm over [0-9.]+m?s; the election assumes within ±50000 ppm \(5%\)$`,
		`(?m)^  stream-leader election \(4s to 9s after .*\): at TTL 5s a leader stands down 4.208s after its last renewal and renews every 3.75s: it rides out a 4s one that starts within 208ms of a renewal \(6% of its cycle\), a 9s one never$`,
		`(?m)^  smallest safe TTL: \d+s: 4 renewals of [0-9.]+ms \(the p99 of the stream info requests\) fit its retry window \d+ms, and its work deadline [0-9.]+s comes before the earliest expiry, with the servers' clocks [0-9.]+ms apart, as measured$`,
		`(?m)^  recommended TTL: (11s \(the smallest at which a leader rides out a 9s stream-leader election that starts right after a renewal\)|\d+s \(the smallest safe TTL\)); the bucket's is 5s$`,
		`(?m)^  not measured: key expiry lag after the TTL: read-only \(--write writes a probe key and waits it out: 5s\)$`,
		`(?m)^  not measured: stream-leader step-down: not asked`,
		`(?m)^  warning: at TTL 5s a 9s stream-leader election outlasts a leader's validity 4.208s`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("verify's output does not match %s", want)
		}
	}

	code, stdout, stderr = asVerifyUser(t, url, "app", "verify", "--bucket", "V", "--duration", "1s", "--samples", "10", "--write", "--step-down", "--json")
	var r verifyReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != checkWarning || stderr != "" {
		t.Fatalf("verify --write --step-down --json: exit %d, stderr %q, %v:\n%s", code, stderr, err, stdout)
	}
	t.Logf("election verify --write --step-down --json:\n%s", stdout)
	switch {
	case r.Status != "WARNING" || r.Code != checkWarning || r.TTL != 5000 || len(r.Replicas) != 3:
		t.Errorf("status %s (%d), TTL %v ms, replicas %+v; want WARNING, 5000 and three replicas", r.Status, r.Code, r.TTL, r.Replicas)
	case len(r.RoundTrips) != 3 || r.RoundTrips[2].Samples != 10 || r.Renewal != r.RoundTrips[2].P99:
		t.Errorf("round trips %+v, renewal %v: want stream info, ping and the probe key's 10 updates, whose p99 the TTLs rest on", r.RoundTrips, r.Renewal)
	case r.ExpiryLag == nil || r.ExpiryLag.Lag+r.ExpiryLag.Error < 0 || r.ExpiryLag.Lag > 1000:
		t.Errorf("expiry lag %+v: want one, not early, within a second", r.ExpiryLag)
	case r.StepDown == nil || r.StepDown.From == r.StepDown.To || r.StepDown.To == "" || r.StepDown.Write == nil || r.StepDown.RetryWindow != msOf(timing.Validity-timing.Interval):
		t.Errorf("step-down %+v: want a new leader, a write after it, and the retry window", r.StepDown)
	case len(r.Clocks.Servers) != 3 || r.Clocks.Spread == nil || r.ClockRate == nil:
		t.Errorf("clocks %+v, rate %+v: want three servers, their spread and a rate", r.Clocks, r.ClockRate)
	case r.StreamElection == nil || r.StreamElection.RidesOut || r.SmallestSafeTTL == nil || r.RecommendedTTL == nil:
		t.Errorf("stream election %+v, smallest safe TTL %v, recommended %v: want no ride-out, and both TTLs", r.StreamElection, r.SmallestSafeTTL, r.RecommendedTTL)
	default:
		// The smallest safe TTL follows from the round trip measured, which
		// a loaded machine lengthens; the recommendation is 11 s unless
		// that is below it.
		safe, _ := smallestSafeTTL(r.Renewal.duration(), (*r.Clocks.Spread + *r.Clocks.SpreadError).duration())
		if r.SmallestSafeTTL.duration() != safe || r.RecommendedTTL.duration() != max(safe, 11*time.Second) {
			t.Errorf("smallest safe TTL %v, recommended %v; want %v for renewals of %v, and the larger of it and 11s", *r.SmallestSafeTTL, *r.RecommendedTTL, safe, r.Renewal)
		}
	}

	// A user who may not ping the servers is told how to have them read.
	code, stdout, _ = asVerifyUser(t, url, "limited", "verify", "--bucket", "V", "--duration", "1s", "--samples", "5")
	if code != checkWarning || !strings.Contains(stdout, `  not measured: server clock offsets: this user's account could not ping the servers ($SYS.REQ.SERVER.PING.CONNZ: permission denied: publish to "$SYS.REQ.SERVER.PING.CONNZ"); give a system-account user with --system-context NAME or --system-creds FILE, or allow this user to publish to $SYS.REQ.SERVER.PING.CONNZ`+"\n") ||
		!strings.Contains(stdout, "with the servers' clocks as far apart as the election assumes\n") {
		t.Errorf("verify as a user denied $SYS: exit %d:\n%s\nwant the clocks not measured, saying how", code, stdout)
	}
	code, stdout, _ = asVerifyUser(t, url, "limited", "bucket", "check", "--bucket", "V")
	if code != ExitOK || !strings.Contains(stdout, "clocks, not read: this user's account could not ping the servers") {
		t.Errorf("bucket check as a user denied $SYS: exit %d:\n%s\nwant the clocks not read, saying how", code, stdout)
	}

	sysContext := filepath.Join(t.TempDir(), "sys.json")
	if err := os.WriteFile(sysContext, fmt.Appendf(nil, `{"url": %q, "user": "sys", "password": %q}`, url, secret), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = asVerifyUser(t, url, "limited", "verify", "--bucket", "V", "--duration", "1s", "--samples", "5", "--system-context", sysContext)
	if code != checkWarning || !regexp.MustCompile(`(?m)^  server clocks, less this host's, read through the system account \(--system-context .*sys\.json\), \$SYS\.REQ\.SERVER\.PING\.VARZ: v1 .*, v2 .*, v3 .*$`).MatchString(stdout) {
		t.Errorf("verify with --system-context: exit %d:\n%s\nwant the clocks read through the system account", code, stdout)
	}
	code, stdout, _ = asVerifyUser(t, url, "limited", "bucket", "check", "--bucket", "V", "--system-context", sysContext)
	if code != ExitOK || !regexp.MustCompile(`(?m)^clocks: read from 3 servers through the system account .*VARZ; each server's clock less this host's: v1 .*$`).MatchString(stdout) ||
		!regexp.MustCompile(`(?m)^clocks: the bucket's servers agree within [0-9.]+ms ±[0-9.]+ms \(v\d ahead of v\d\); the election assumes 100ms$`).MatchString(stdout) {
		t.Errorf("bucket check with --system-context: exit %d:\n%s\nwant the clocks read through the system account", code, stdout)
	}
}
