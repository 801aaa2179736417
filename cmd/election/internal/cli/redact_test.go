package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestRedactURLsHidesUsersPasswordsAndTokens(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://admin:s3cret@127.0.0.1:4222":               "nats://REDACTED@127.0.0.1:4222",
		"tls://t0ken@h:1,nats://h2:2":                      "tls://REDACTED@h:1,nats://h2:2",
		"admin:s3cret@h:4222":                              "REDACTED@h:4222",
		"nats://h:4222":                                    "nats://h:4222",
		"nats://a:p@ss@h:1":                                "nats://REDACTED@h:1",
		" nats://u:p@h:1 , wss://u:p@h:2/path?query=value": "nats://REDACTED@h:1,wss://REDACTED@h:2/path?query=value",
	} {
		if got := redactURLs(in); got != want {
			t.Errorf("redactURLs(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNoCommandPrintsTheSecretOfAServerURL runs every subcommand against
// server URLs carrying a password, unreachable or malformed, and checks that
// no output line holds the password, and that a malformed URL is bad input.
func TestNoCommandPrintsTheSecretOfAServerURL(t *testing.T) {
	t.Parallel()
	const secret = "s3cretPa55"
	commands := [][]string{ // the subcommand, with its flags before any COMMAND
		{"status"}, {"status", "--key", "k", "--watch"}, {"resign", "--key", "k"},
		{"transfer", "--key", "k", "--to", "b"}, {"bucket", "create"}, {"bucket", "check"},
		{"run", "--key", "k"}, {"run", "--once", "--key", "k"},
	}
	servers := map[string]int{
		"nats://admin:" + secret + "@127.0.0.1:1": ExitError, // nothing listens there
		"http://admin:" + secret + "@127.0.0.1:1": ExitUsage,
		"nats://admin:" + secret + "@":            ExitUsage,
	}
	for _, args := range commands {
		for server, want := range servers {
			var stdout, stderr bytes.Buffer
			all := append(append([]string{}, args...), "--server", server)
			if args[0] == "run" {
				all = append(all, "--", "true")
			}
			code := Main(all, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			if strings.Contains(out, secret) {
				t.Errorf("election %s --server %s printed the password:\n%s", strings.Join(args, " "), redactURL(server), out)
			}
			if code != want {
				t.Errorf("election %s --server %s exited %d, want %d:\n%s", strings.Join(args, " "), redactURL(server), code, want, out)
			}
		}
	}
}

// TestHelpPrintsNoSecretFromTheEnvironment sets every NATS_* variable to a
// secret: no command's --help may print it.
func TestHelpPrintsNoSecretFromTheEnvironment(t *testing.T) {
	isolateNATSEnv(t)
	for name := range (&connFlags{}).connEnv() {
		t.Setenv(name, "nats://u:"+secret+"@h:1")
	}
	helps := [][]string{{"bucket", "create", "--help"}, {"bucket", "check", "--help"}}
	for _, c := range commands {
		helps = append(helps, []string{c.name, "--help"})
	}
	for _, args := range helps {
		var stdout, stderr bytes.Buffer
		Main(args, &stdout, &stderr)
		if strings.Contains(stdout.String()+stderr.String(), secret) {
			t.Errorf("election %s printed a secret from the environment", strings.Join(args, " "))
		}
	}
}
