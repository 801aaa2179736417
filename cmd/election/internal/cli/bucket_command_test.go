package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

func TestBucketCreateMakesOrKeepsTheBucket(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())

	code, stdout, stderr := runCLI(t, "bucket", "create", "-s", s.ClientURL(), "--bucket", "JOBS", "--ttl", "3s")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	want := "created bucket JOBS\nhistory of bucket JOBS: kept 7d\nbucket JOBS: TTL 3s, history 1, replicas 1, file storage\nusable for elections\n"
	if stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	kv, err := js.KeyValue(context.Background(), "JOBS")
	if err != nil {
		t.Fatal(err)
	}
	if status, err := kv.Status(context.Background()); err != nil || status.TTL() != 3*time.Second {
		t.Fatalf("bucket status %v, %v; want TTL 3s", status, err)
	}

	code, stdout, _ = runCLI(t, "bucket", "create", "-s", s.ClientURL(), "--bucket", "JOBS")
	if code != 0 || !strings.HasPrefix(stdout, "bucket JOBS exists; left as it is\nhistory of bucket JOBS: kept 7d\nbucket JOBS: TTL 3s") {
		t.Errorf("again without settings: exit %d, stdout %q; want 0, the bucket left at TTL 3s", code, stdout)
	}
	code, stdout, stderr = runCLI(t, "bucket", "create", "-s", s.ClientURL(), "--bucket", "JOBS", "--ttl", "20s", "--replicas", "1", "--storage", "memory")
	e2e.WantOneLineError(t, code, ExitError, stdout, stderr, `bucket "JOBS" exists with TTL 3s, not --ttl 20s, file storage, not --storage memory; it is left as it is`)
	if status, err := kv.Status(context.Background()); err != nil || status.TTL() != 3*time.Second {
		t.Fatalf("bucket status %v, %v; want TTL 3s still", status, err)
	}

	code, stdout, _ = runCLI(t, "bucket", "create", "-s", s.ClientURL(), "--bucket", "MEM", "--storage", "memory", "--history", "0")
	if code != 0 || !strings.Contains(stdout, "TTL 10s, history 1, replicas 1, memory storage\nwarning: memory storage") {
		t.Errorf("memory bucket: exit %d, stdout %q; want 0, TTL 10s and a warning", code, stdout)
	}
	if strings.Contains(stdout, "history of bucket") {
		t.Errorf("--history 0 made a history: %q", stdout)
	}
	if _, err := js.Stream(context.Background(), "KVELECT_HISTORY_MEM"); err == nil {
		t.Errorf("--history 0 made the history stream")
	}
}

func TestBucketCheckPrintsWarningsAndProblems(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "GOOD", TTL: 10 * time.Second})
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "MARKERS", TTL: 10 * time.Second, LimitMarkerTTL: time.Second})
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "BAD", TTL: time.Second, LimitMarkerTTL: time.Second})

	for name, want := range map[string]struct {
		code int
		says []string
	}{
		"GOOD": {0, []string{"bucket GOOD: TTL 10s", "durability: file storage, 1 replica\n", "durability: one replica",
			"durability, not checked: whether every server fsyncs", `"sync_always": true`,
			"clocks: read from 1 server through this user's account, $SYS.REQ.SERVER.PING.CONNZ; each server's clock less this host's: n1 ",
			"clocks: one server: no offsets between servers to compare\n", "usable for elections\n"}},
		"MARKERS": {0, []string{"warning: per-message TTLs are on", "usable for elections\n"}},
		"BAD":     {1, []string{"warning: per-message TTLs", "problem: bucket TTL 1s, allowed 2s to 1h0m0s\n", "unusable for elections\n"}},
	} {
		code, stdout, stderr := runCLI(t, "bucket", "check", "--server", s.ClientURL(), "--bucket", name)
		if code != want.code || stderr != "" {
			t.Errorf("%s: exit %d, stderr %q; want exit %d", name, code, stderr, want.code)
		}
		for _, s := range want.says {
			if !strings.Contains(stdout, s) {
				t.Errorf("%s: stdout %q does not say %q", name, stdout, s)
			}
		}
	}

	code, stdout, _ := runCLI(t, "bucket", "create", "--server", s.ClientURL(), "--bucket", "BAD")
	if code != 1 || !strings.Contains(stdout, "bucket BAD exists and is unusable for elections:\nproblem: bucket TTL 1s") {
		t.Errorf("create over an unusable bucket: exit %d, stdout %q; want 1 and the problem", code, stdout)
	}
}

func TestBucketErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	for name, tc := range map[string]struct {
		args []string
		code int
		says []string
	}{
		"missing bucket":      {[]string{"check", "-s", url, "--bucket", "NOPE"}, 1, []string{`bucket "NOPE" does not exist`, "election bucket create --bucket NOPE"}},
		"invalid bucket name": {[]string{"check", "-s", url, "--bucket", "a.b"}, 2, []string{`invalid value "a.b" for flag -bucket`, "allowed: letters, digits, - and _"}},
		"malformed server":    {[]string{"check", "-s", "http://127.0.0.1:1"}, 2, []string{`server "http://127.0.0.1:1": scheme "http": want nats, tls, ws or wss`}},
		"server of colons":    {[]string{"check", "-s", "nats://::::"}, 2, []string{`server "nats://::::" is not a URL`}},
		"port out of range":   {[]string{"check", "-s", "nats://h:70000"}, 2, []string{`server "nats://h:70000" is not a URL`}},
		"unreachable server":  {[]string{"check", "-s", "nats://127.0.0.1:1"}, 1, []string{"connecting to nats://127.0.0.1:1", "no servers available"}},
		"TTL too short":       {[]string{"create", "-s", url, "--ttl", "1s"}, 2, []string{"TTL 1s, allowed 2s to 1h0m0s"}},
		"TTL not a duration":  {[]string{"create", "-s", url, "--ttl", "ten"}, 2, []string{`invalid value "ten" for flag -ttl`}},
		"even replicas":       {[]string{"create", "-s", url, "--replicas", "2"}, 2, []string{"replicas 2: allowed 1, 3 or 5"}},
		"zero replicas":       {[]string{"create", "-s", url, "--replicas", "0"}, 2, []string{"--replicas 0: want 1, 3 or 5"}},
		"unknown storage":     {[]string{"create", "-s", url, "--storage", "disk"}, 2, []string{`--storage "disk": want file or memory`}},
		"extra argument":      {[]string{"check", "-s", url, "JOBS"}, 2, []string{`unexpected argument "JOBS"`}},
		"no action":           {nil, 2, []string{"want create or check"}},
		"unknown action":      {[]string{"delete"}, 2, []string{`unknown action "delete"; want create or check`}},
		"unknown flag":        {[]string{"--ttl", "3s"}, 2, []string{"flag provided but not defined: -ttl"}},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"bucket"}, tc.args...)...)
			e2e.WantOneLineError(t, code, tc.code, stdout, stderr, tc.says...)
		})
	}
}

func TestBucketCreateWithReplicasOnASingleServerGivesAHint(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	code, stdout, stderr := runCLI(t, "bucket", "create", "-s", s.ClientURL(), "--bucket", "JOBS", "--ttl", "10s", "--replicas", "3")
	if code != ExitError || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want %d and nothing", code, stdout, ExitError)
	}
	if !strings.Contains(stderr, "replicas > 1 not supported") || !strings.HasSuffix(stderr, "; on a single server use --replicas 1\n") {
		t.Errorf("stderr %q; want the server's error and the hint", stderr)
	}
}
