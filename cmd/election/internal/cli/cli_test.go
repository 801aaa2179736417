package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
)

// runCLI runs election with args in this process, with no nats context and
// no NATS_URL or NATS_CONTEXT from the environment (TestMain's
// isolateProcessEnv, or a serial test's own t.Setenv), and returns its exit
// code and output. It sets no variable itself, so parallel tests may call it.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// isolateNATSEnv keeps the user's nats contexts and NATS_* variables out of
// the test, and returns the directory nats contexts are read from.
func isolateNATSEnv(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	for name := range (&connFlags{}).connEnv() {
		t.Setenv(name, "")
	}
	return filepath.Join(dir, "nats")
}

func TestHelpListsCommandsAndFlags(t *testing.T) {
	t.Parallel()
	for args, says := range map[string][]string{
		"--help":               {"run ", "sidecar ", "status ", "resign ", "transfer ", "bucket ", "verify ", "completion ", "election COMMAND --help"},
		"help help":            {"run ", "election COMMAND --help"},
		"--help -h":            {"run ", "election COMMAND --help"},
		"run -h":               {"--metrics ADDR", "/metrics", "/healthz", "--health-tolerance DURATION", "(default 1s)", "--leader-file FILE"},
		"status --help":        {"--key KEY", "--watch", "--json", "watchers", "-s, --server URLs", "Exit status"},
		"help resign":          {"--key KEY", "--timeout DURATION", "(default 30s)", "--context NAME", "Exit status"},
		"transfer --help":      {"--to NAME", "--key KEY", "--timeout DURATION", "half the bucket's TTL", "Exit status"},
		"help run":             {"KVELECT_TOKEN", "--key KEY", "-s, --server URLs", "--context NAME", "--grace DURATION", "(default 10s)", "Exit status"},
		"run --help":           {"KVELECT_LEADER", "--bucket NAME", "(default ELECTIONS)", "NATS_URL", "NATS_CONTEXT"},
		"sidecar --help":       {"--listen ADDR", "(default 127.0.0.1:4040)", "--leader-file FILE", "GET /self", "GET /events", "--priority N", "--metrics ADDR", "-s, --server URLs", "Exit status"},
		"bucket --help":        {"election bucket create", "election bucket check", "problem:"},
		"bucket create --help": {"--ttl DURATION", "--replicas N", "--storage TYPE", "-s, --server URLs"},
		"bucket check -h":      {"--bucket NAME", "--context NAME", "--system-context NAME", "--system-creds FILE", "clocks:"},
		"verify --help":        {"--samples N", "--duration DURATION", "--write", "--step-down", "--system-context NAME", "--json", "Exit status"},
		"permissions --help":   {"--role ROLE", "candidate", "observer", "admin", "--format FORMAT", "nsc"},
		"status -h":            {"--creds FILE", "--nkey FILE", "--user USER", "--password PASSWORD", "--token TOKEN", "--tlscert FILE", "--tlskey FILE", "--tlsca FILE", "--tlsfirst", "--js-domain DOMAIN", "--inbox-prefix PREFIX", "NATS_CREDS"},
	} {
		code, stdout, stderr := runCLI(t, strings.Fields(args)...)
		if code != 0 || stderr != "" {
			t.Errorf("%s: exit %d, stderr %q; want 0 and nothing", args, code, stderr)
		}
		for _, s := range says {
			if !strings.Contains(stdout, s) {
				t.Errorf("%s: help does not say %q:\n%s", args, s, stdout)
			}
		}
	}
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, "start")
	e2e.WantOneLineError(t, code, ExitUsage, stdout, stderr, `unknown command "start"`, "run, sidecar, agent, status, resign, transfer, history, check, dashboard, bucket, verify or permissions")
}

func TestConnectUsesTheNATSContext(t *testing.T) {
	s := testenv.Server(t)
	natsDir := isolateNATSEnv(t)
	if err := os.MkdirAll(filepath.Join(natsDir, "context"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctxFile := filepath.Join(natsDir, "context", "e2e.json")
	for file, url := range map[string]string{ctxFile: s.ClientURL(), filepath.Join(natsDir, "context", "elsewhere.json"): "nats://127.0.0.1:1"} {
		if err := os.WriteFile(file, []byte(`{"url": "`+url+`"}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, tc := range map[string]struct {
		env  map[string]string
		args []string
		dir  string // the working directory, if not the test's
	}{
		"--context":                     {args: []string{"--context", "e2e"}},
		"NATS_CONTEXT":                  {env: map[string]string{"NATS_CONTEXT": "e2e"}},
		"a context file":                {args: []string{"--context", ctxFile}},
		"a relative context file":       {args: []string{"--context", "e2e.json"}, dir: filepath.Dir(ctxFile)},
		"NATS_URL":                      {env: map[string]string{"NATS_URL": s.ClientURL()}},
		"--server over NATS_URL":        {env: map[string]string{"NATS_URL": "nats://127.0.0.1:1"}, args: []string{"-s", s.ClientURL()}},
		"--server over a context's URL": {args: []string{"--server", s.ClientURL(), "--context", "elsewhere"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("NATS_URL", "")
			t.Setenv("NATS_CONTEXT", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if tc.dir != "" {
				t.Chdir(tc.dir)
			}
			var out, errOut bytes.Buffer
			args := append([]string{"bucket", "create", "--bucket", "CTX"}, tc.args...)
			if code := Main(args, &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
			}
		})
	}

	var out, errOut bytes.Buffer
	code := Main([]string{"bucket", "check", "--context", "nope"}, &out, &errOut)
	e2e.WantOneLineError(t, code, ExitError, out.String(), errOut.String(), `nats context "nope"`, `unknown context "nope"`)
}

func TestAgentHelpListsPriorities(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, "agent", "--help")
	if code != 0 || stderr != "" {
		t.Fatalf("agent --help: exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	for _, s := range []string{"--priority N", "--prefer-higher", "the highest priority", "_node_priority"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("agent --help does not say %q:\n%s", s, stdout)
		}
	}
	code, stdout, stderr = runCLI(t, "agent", "--daemon", "x=a", "--priority", "-2")
	e2e.WantOneLineError(t, code, ExitUsage, stdout, stderr, "--priority -2: want 0 (the default: every node equal) or more")
}

// TestFailDoesNotRepeatTheCommandsName: a library error's "election: "
// prefix is dropped after the command's own name.
func TestFailDoesNotRepeatTheCommandsName(t *testing.T) {
	var out strings.Builder
	fail(&out, "election run", fmt.Errorf("%w: bucket TTL 1s", election.ErrBucketConfig))
	if got := out.String(); strings.Contains(got, "election: ") || !strings.HasPrefix(got, "election run: bucket unusable for elections: bucket TTL 1s") {
		t.Errorf("fail wrote %q", got)
	}
}

// TestCompletionScriptsCompleteCommandsAndFlags: election completion bash
// names every command, bucket's actions and the flags of each; zsh's script
// asks election for completions, which name a command's flags.
func TestCompletionScriptsCompleteCommandsAndFlags(t *testing.T) {
	t.Parallel()
	code, bash, stderr := runCLI(t, "completion", "bash")
	if code != ExitOK || stderr != "" {
		t.Fatalf("completion bash: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{`commands+=("run")`, `commands+=("sidecar")`, `commands+=("permissions")`, `commands+=("create")`,
		`flags+=("--key=")`, `flags+=("--leader-file=")`, `flags+=("--ttl=")`, `two_word_flags+=("-s")`, `flags+=("--json")`} {
		if !strings.Contains(bash, want) {
			t.Errorf("the bash completion script lacks %s", want)
		}
	}
	code, zsh, stderr := runCLI(t, "completion", "zsh")
	if code != ExitOK || stderr != "" || !strings.HasPrefix(zsh, "#compdef election") {
		t.Errorf("completion zsh: exit %d, stderr %q, script starting %.40q", code, stderr, zsh)
	}
	code, completions, _ := runCLI(t, "__complete", "sidecar", "--lis")
	if code != ExitOK || !strings.HasPrefix(completions, "--listen\tserve the leadership over HTTP on ADDR") {
		t.Errorf("completing sidecar --lis: exit %d, %q; want --listen and what it does", code, completions)
	}
	code, stdout, stderr := runCLI(t, "completion", "fish")
	e2e.WantOneLineError(t, code, ExitUsage, stdout, stderr, `election completion: shell "fish": want bash or zsh`)
}
