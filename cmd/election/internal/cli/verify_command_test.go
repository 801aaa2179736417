package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestVerifyOnASingleServer: on one server, with a bucket at TTL 5 s,
// verify measures what it can (round trips, the server's clock, the clock
// rate, with --write the updates and the expiry lag), is OK, and says what
// it cannot measure: offsets between servers, stream-leader elections and
// a step-down.
func TestVerifyOnASingleServer(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ELECTIONS", TTL: 5 * time.Second})

	code, stdout, stderr := runCLI(t, "verify", "-s", s.ClientURL(), "--duration", "1s", "--samples", "10", "--write", "--step-down")
	t.Logf("election verify --write --step-down on one server:\n%s", stdout)
	if code != checkOK || stderr != "" {
		t.Errorf("exit %d, stderr %q; want 0", code, stderr)
	}
	for _, want := range []string{
		`(?m)^election verify ELECTIONS: OK$`,
		`(?m)^  bucket ELECTIONS: TTL 5s, 1 replica, file storage$`,
		`(?m)^  round trips of stream info requests, answered by the stream leader: median [0-9.]+ms, p99 [0-9.]+ms \(10 samples\)$`,
		`(?m)^  server clocks, less this host's, read through this user's account, \$SYS\.REQ\.SERVER\.PING\.CONNZ: n1 [-+][0-9.]+ms ±[0-9.]+ms \(stream leader\)$`,
		`(?m)^  this host's clock rate against n1's \(the stream leader\): [-+]\d+ ppm ±\d+ ppm`,
		`(?m)^  round trips of revision-checked updates of a probe key, a renewal's path: median [0-9.]+ms, p99 [0-9.]+ms \(10 samples\)$`,
		`(?m)^  key expiry lag: the probe key was gone [-+][0-9.]+ms ±[0-9.]+ms after its TTL 5s$`,
		`(?m)^  smallest safe TTL: [2-5]s: 4 renewals of [0-9.]+ms \(the p99 of the probe key's updates\) fit its retry window \d+ms, and its work deadline [0-9.]+s comes before the earliest expiry$`,
		`(?m)^  recommended TTL: [2-5]s \(the smallest safe TTL\); the bucket's is 5s$`,
		`(?m)^  not measured: server clock offsets between the bucket's servers: it has one server$`,
		`(?m)^  not measured: stream-leader elections: the bucket has one replica \(a restart of its server stops elections instead\)$`,
		`(?m)^  not measured: stream-leader step-down: the bucket has one replica, with none to take over$`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("verify's output does not match %s", want)
		}
	}

	// The probe key is kvelect's own: no election sees a leader in it.
	ctx := t.Context()
	kv, err := js.KeyValue(ctx, "ELECTIONS")
	if err != nil {
		t.Fatal(err)
	}
	b, err := election.OpenBucket(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if leaders, err := b.Leaders(ctx); err != nil || len(leaders) != 0 {
		t.Errorf("leaders after verify --write: %+v (%v), want none", leaders, err)
	}

	code, stdout, _ = runCLI(t, "verify", "-s", s.ClientURL(), "--duration", "500ms", "--samples", "5", "--json")
	var r verifyReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil || code != checkOK {
		t.Fatalf("verify --json: exit %d, %v:\n%s", code, err, stdout)
	}
	if r.Status != "OK" || len(r.Clocks.Servers) != 1 || r.Clocks.Spread != nil || r.StreamElection != nil || r.ExpiryLag != nil || len(r.NotMeasured) != 4 {
		t.Errorf("verify --json on one server: %+v; want OK, one clock and no spread, no stream election, four figures not measured", r)
	}
}

// TestVerifyErrorsAreClear: bad flags are one line naming the flag, the
// value and what is allowed, exit 3 as election check's; a missing bucket
// or an unreachable server is UNKNOWN, saying why.
func TestVerifyErrorsAreClear(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	creds := filepath.Join(t.TempDir(), "sys.creds")
	if err := os.WriteFile(creds, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		says string
	}{
		"too few samples":     {[]string{"--samples", "1"}, "--samples 1: want 5 to 1000"},
		"too many samples":    {[]string{"--samples", "5000"}, "--samples 5000: want 5 to 1000"},
		"no duration":         {[]string{"--duration", "0s"}, "--duration 0s: want above 0, at most 10m0s"},
		"duration too long":   {[]string{"--duration", "1h"}, "--duration 1h0m0s: want above 0, at most 10m0s"},
		"both system users":   {[]string{"--system-context", "sys", "--system-creds", creds}, "--system-context and --system-creds given together"},
		"missing creds":       {[]string{"--system-creds", "/nonexistent/sys.creds"}, `--system-creds "/nonexistent/sys.creds": cannot read the file`},
		"an argument":         {[]string{"ELECTIONS"}, `unexpected argument "ELECTIONS"`},
		"invalid bucket name": {[]string{"--bucket", "a.b"}, "allowed: letters, digits, - and _"},
		"unknown flag":        {[]string{"--key", "k"}, "flag provided but not defined: -key"},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"verify", "-s", url}, tc.args...)...)
			e2e.WantOneLineError(t, code, checkUnknown, stdout, stderr, tc.says)
		})
	}

	for name, tc := range map[string]struct {
		args []string
		says string
	}{
		"missing bucket":     {[]string{"-s", url, "--bucket", "NOPE"}, `  unknown: bucket "NOPE" does not exist; create it with: election bucket create --bucket NOPE --ttl 10s` + "\n"},
		"unreachable server": {[]string{"-s", "nats://127.0.0.1:1"}, "  unknown: connecting to nats://127.0.0.1:1"},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"verify"}, tc.args...)...)
			if code != checkUnknown || stderr != "" || !strings.HasPrefix(stdout, "election verify ") || !strings.Contains(stdout, tc.says) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d and UNKNOWN saying %q", code, stdout, stderr, checkUnknown, tc.says)
			}
		})
	}
}
