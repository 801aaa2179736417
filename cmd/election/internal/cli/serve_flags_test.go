package cli

import (
	"strings"
	"testing"

	"github.com/kvelect/election/cmd/election/internal/e2e"
)

// TestServeFlagsAreChecked: --serve and --forward of sidecar and run are
// checked before anything connects, each refusal one line naming what is
// allowed, and no URL's password is printed.
func TestServeFlagsAreChecked(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{{"sidecar", "--key", "job"}, {"run", "--key", "job"}} {
		for says, args := range map[string][]string{
			"--serve needs --forward":          {"--serve", "svc.report"},
			"--forward is for --serve":         {"--forward", "http://127.0.0.1:8080"},
			"--service-name is for --serve":    {"--service-name", "x"},
			`has the wildcard '*'`:             {"--serve", "svc.*", "--forward", "http://127.0.0.1:8080"},
			`has the wildcard '>'`:             {"--serve", "svc.>", "--forward", "http://127.0.0.1:8080"},
			"white space":                      {"--serve", "svc report", "--forward", "http://127.0.0.1:8080"},
			"empty token":                      {"--serve", "svc..report", "--forward", "http://127.0.0.1:8080"},
			"the scheme must be http or https": {"--serve", "svc.report", "--forward", "ftp://u:" + secret + "@host/x"},
			"has no host":                      {"--serve", "svc.report", "--forward", "http:///x"},
			"--service-name: service name":     {"--serve", "svc.report", "--forward", "http://127.0.0.1:8080", "--service-name", "a.b"},
		} {
			all := append(append(append([]string{}, cmd...), args...), "--", "true")
			if cmd[0] == "sidecar" {
				all = all[:len(all)-2]
			}
			code, stdout, stderr := runCLI(t, all...)
			e2e.WantOneLineError(t, code, ExitUsage, stdout, stderr, says)
			if strings.Contains(stderr, secret) {
				t.Errorf("%v printed the password: %s", all, stderr)
			}
		}
	}
	code, stdout, stderr := runCLI(t, "run", "--key", "job", "--once", "--serve", "svc.report", "--forward", "http://127.0.0.1:8080", "--", "true")
	e2e.WantOneLineError(t, code, ExitUsage, stdout, stderr, "--serve is not for --once")
}
