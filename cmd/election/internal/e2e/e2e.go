// Package e2e runs the election binary for end-to-end tests: it builds the
// binary once per test run, starts it as processes whose output the tests
// read, and keeps the user's NATS configuration out of them. The tests of
// cmd/election and of its internal/cli share it.
package e2e

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvelect/election/internal/guard"
	"github.com/kvelect/election/internal/testenv"
)

// WaitTimeout bounds every wait of the end-to-end tests: for a leader, a
// failover, a process to exit.
const WaitTimeout = 30 * time.Second

// Main is a test package's TestMain: it runs the tests, or the guard of a
// COMMAND when a test's election run starts the test binary again as its
// guard. Before the tests it unsets each variable of unset (the connection
// settings the commands read from the environment) and points
// XDG_CONFIG_HOME at an empty directory, once for the whole run, so that
// tests running election in the test's process need no t.Setenv and may
// run in parallel; the tests that set a variable or a context of their own
// do it with t.Setenv, stay serial, and leave this environment as they
// found it. After the tests it checks that none left a goroutine behind.
func Main(m *testing.M, unset []string) {
	if len(os.Args) > 1 && os.Args[1] == guard.Command {
		os.Exit(guard.Main(os.Args[2:], os.Stderr))
	}
	dir, err := os.MkdirTemp("", "kvelect-cmd-test-")
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	built.dir = dir
	flag.Parse()
	if !flagGiven("test.parallel") {
		flag.Set("test.parallel", strconv.Itoa(max(runtime.GOMAXPROCS(0), defaultParallel)))
	}
	if err := isolateProcessEnv(dir, unset); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	testenv.VerifyNoLeaks(m, func() { os.RemoveAll(dir) })
}

// defaultParallel is how many parallel tests run at once unless -parallel
// says otherwise: at least this many, more if GOMAXPROCS is larger. They
// wait on TTLs, servers and processes far more than they compute (about a
// fifth of one core each under -race), so the default of GOMAXPROCS would
// leave a small machine idle: on 2 cores, 2 at a time take 95 s, 4 at a
// time 53 s.
const defaultParallel = 4

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// isolateProcessEnv points XDG_CONFIG_HOME at an empty directory under dir
// and unsets each variable of unset.
func isolateProcessEnv(dir string, unset []string) error {
	config := filepath.Join(dir, "config")
	if err := os.Mkdir(config, 0o700); err != nil {
		return err
	}
	if err := os.Setenv("XDG_CONFIG_HOME", config); err != nil {
		return err
	}
	for _, name := range unset {
		if err := os.Unsetenv(name); err != nil {
			return err
		}
	}
	return nil
}

// BuildElection builds the election command once for the run, for the
// tests that run it as a process.
func BuildElection(t *testing.T) string {
	t.Helper()
	return BuildOnce(t, "election", "github.com/kvelect/election/cmd/election")
}

// built holds the binaries the tests build, each once for the whole run
// (building and linking one takes seconds).
var built struct {
	dir  string
	mu   sync.Mutex
	bins map[string]string // by package
}

// BuildOnce returns the path of pkg's binary, named name, built on the
// first call for the package.
func BuildOnce(t *testing.T, name, pkg string) string {
	t.Helper()
	built.mu.Lock()
	defer built.mu.Unlock()
	if bin, ok := built.bins[pkg]; ok {
		return bin
	}
	bin := filepath.Join(built.dir, name)
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	if built.bins == nil {
		built.bins = map[string]string{}
	}
	built.bins[pkg] = bin
	return bin
}

// WantOneLineError checks that a command failed with code and said, on one
// line of stderr, each of says.
func WantOneLineError(t *testing.T, code, wantCode int, stdout, stderr string, says ...string) {
	t.Helper()
	if code != wantCode || strings.Count(stderr, "\n") != 1 || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and one line on stderr", code, stdout, stderr, wantCode)
	}
	for _, s := range says {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr %q does not say %q", stderr, s)
		}
	}
}
