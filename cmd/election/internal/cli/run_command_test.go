package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

func TestRunErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "FOREVER"})
	for name, tc := range map[string]struct {
		args []string
		code int
		says []string
	}{
		"no key":            {[]string{"-s", url, "--", "true"}, 2, []string{"--key is required"}},
		"empty key":         {[]string{"-s", url, "--key", "", "--", "true"}, 2, []string{"--key is required"}},
		"invalid key":       {[]string{"-s", url, "--key", "a b", "--", "true"}, 2, []string{`invalid argument: key "a b"`, "allowed: letters, digits"}},
		"invalid name":      {[]string{"-s", url, "--key", "k", "--name", "released:x", "--", "true"}, 2, []string{`invalid argument: candidate name "released:x"`}},
		"name with a space": {[]string{"-s", url, "--key", "k", "--name", "svc a", "--", "true"}, 2, []string{`invalid argument: candidate name "svc a": allowed: letters, digits and - / _ = .`}},
		"no command":        {[]string{"-s", url, "--key", "k"}, 2, []string{"no COMMAND given"}},
		"negative grace":    {[]string{"-s", url, "--key", "k", "--grace", "-1s", "--", "true"}, 2, []string{"--grace -1s: want a duration of 0 or more"}},
		"grace without a unit": {[]string{"-s", url, "--key", "k", "--grace", "10", "--", "true"}, 2,
			[]string{`invalid value "10" for flag -grace`, "allowed: a number with a unit, such as 10s"}},
		"bad log format":     {[]string{"-s", url, "--key", "k", "--log-format", "xml", "--", "true"}, 2, []string{`--log-format "xml": want text or json`}},
		"negative priority":  {[]string{"-s", url, "--key", "k", "--priority", "-1", "--", "true"}, 2, []string{"--priority -1: want 0 (never leads) or more"}},
		"ready-for alone":    {[]string{"-s", url, "--key", "k", "--ready-for", "5s", "--", "true"}, 2, []string{"--ready-for is for --prefer-higher"}},
		"negative ready-for": {[]string{"-s", url, "--key", "k", "--prefer-higher", "--ready-for", "-5s", "--", "true"}, 2, []string{"--ready-for -5s: want a duration of 0"}},
		"once on a standby":  {[]string{"-s", url, "--key", "k", "--once", "--priority", "0", "--", "true"}, 2, []string{"--once with --priority 0"}},
		"leader-file in no directory": {[]string{"-s", url, "--key", "k", "--leader-file", filepath.Join(dir, "nope", "leader"), "--", "true"}, 2,
			[]string{"--leader-file", `nope": no such file or directory`}},
		"leader-file under a file": {[]string{"-s", url, "--key", "k", "--leader-file", filepath.Join(notDir, "leader"), "--", "true"}, 2,
			[]string{"--leader-file", "is not a directory"}},
		"leader-file a directory": {[]string{"-s", url, "--key", "k", "--leader-file", dir, "--", "true"}, 2,
			[]string{"--leader-file", "is a directory; want the path of a file"}},
		"unknown flag": {[]string{"--frobnicate", "2s", "--key", "k", "--", "true"}, 2, []string{"flag provided but not defined: -frobnicate (election run --help)"}},
		"ttl of the bucket": {[]string{"--ttl", "1s", "--key", "k", "--", "true"}, 2,
			[]string{"flag provided but not defined: -ttl; the TTL belongs to the bucket: election bucket create --ttl 10s"}},
		"command not found":  {[]string{"-s", url, "--key", "k", "--", "no-such-command-kvelect"}, 127, []string{`"no-such-command-kvelect": executable file not found`}},
		"unreachable server": {[]string{"-s", "nats://127.0.0.1:1", "--key", "k", "--", "true"}, 1, []string{"connecting to nats://127.0.0.1:1"}},
		"missing bucket":     {[]string{"-s", url, "--key", "k", "--", "true"}, 1, []string{`bucket "ELECTIONS" does not exist`, "election bucket create --bucket ELECTIONS"}},
		"unusable bucket":    {[]string{"-s", url, "--key", "k", "--bucket", "FOREVER", "--", "true"}, 1, []string{`bucket "FOREVER": no TTL`}},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append([]string{"run"}, tc.args...)...)
			e2e.WantOneLineError(t, code, tc.code, stdout, stderr, tc.says...)
		})
	}
}

// TestRunExitsWithTheCommandsStatus runs a command that fails at once: run
// must release the key and exit with the command's status.
func TestRunExitsWithTheCommandsStatus(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ELECTIONS", TTL: 2 * time.Second})
	code, _, stderr := runCLI(t, "run", "-s", s.ClientURL(), "--key", "exit3", "--log-format", "json", "--", "sh", "-c", "exit 3")
	if code != 3 {
		t.Fatalf("exit %d, want 3; log:\n%s", code, stderr)
	}
	wantLogged(t, stderr, "the command exited by itself; releasing the key", "released the key")
}

// TestRunKeepsTheLeaderFileWhileItLeads runs a command that copies the
// leader file: it holds the command's token while the command runs, and is
// gone once run has released the key; a file left from before is removed
// at start.
func TestRunKeepsTheLeaderFileWhileItLeads(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ELECTIONS", TTL: 2 * time.Second})
	dir := t.TempDir()
	file := filepath.Join(dir, "leader")
	if err := os.WriteFile(file, []byte("1\n"), 0o644); err != nil { // as if a killed leader left it
		t.Fatal(err)
	}
	copied, token := filepath.Join(dir, "copied"), filepath.Join(dir, "token")
	code, _, stderr := runCLI(t, "run", "-s", s.ClientURL(), "--key", "filed", "--log-format", "json", "--leader-file", file,
		"--", "sh", "-c", `cp "$0" "$1" && echo "$KVELECT_TOKEN" > "$2"`, file, copied, token)
	if code != 0 {
		t.Fatalf("exit %d, want 0; log:\n%s", code, stderr)
	}
	got, _ := os.ReadFile(copied)
	want, _ := os.ReadFile(token)
	if len(want) < 2 || string(got) != string(want) {
		t.Errorf("the leader file held %q while the command ran, want its KVELECT_TOKEN %q", got, want)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the leader file is still there after run exited: %v", err)
	}
	wantLogged(t, stderr, "removed a leader file an earlier process left behind", "released the key")
}

func wantLogged(t *testing.T, log string, says ...string) {
	t.Helper()
	for _, s := range says {
		if !strings.Contains(log, s) {
			t.Errorf("log does not say %q:\n%s", s, log)
		}
	}
}

// TestRunExitsAsTheShellWhenTheCommandCannotRun: 127 for a command that is
// not there, 126 for one that is but cannot be executed.
func TestRunExitsAsTheShellWhenTheCommandCannotRun(t *testing.T) {
	t.Parallel()
	for command, want := range map[string]int{"/etc/passwd": exitCannotRun, "/nonexistent": exitNotFound, "no-such-command": exitNotFound} {
		var stdout, stderr bytes.Buffer
		if code := Main([]string{"run", "--key", "k", "--", command}, &stdout, &stderr); code != want {
			t.Errorf("election run -- %s exited %d, want %d; stderr %q", command, code, want, stderr.String())
		}
	}
}
