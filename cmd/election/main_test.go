package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// TestMain runs the tests, or the guard of a COMMAND when a test's election
// run starts this test binary again as its guard.
func TestMain(m *testing.M) {
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
	if err := isolateProcessEnv(dir); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	testenv.VerifyNoLeaks(m, func() { os.RemoveAll(dir) })
}

// defaultParallel is how many of this package's parallel tests run at once
// unless -parallel says otherwise: at least this many, more if GOMAXPROCS
// is larger. They wait on TTLs, servers and processes far more than they
// compute (about a fifth of one core each under -race), so the default of
// GOMAXPROCS would leave a small machine idle: on 2 cores, 2 at a time take
// 95 s, 4 at a time 53 s.
const defaultParallel = 4

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(name string) bool {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// isolateProcessEnv keeps the user's nats contexts and NATS_* variables
// out of every test, once for the whole run: XDG_CONFIG_HOME is an empty
// directory under dir and each connection variable is unset. runCLI relies
// on it, so that tests running election in this process need no t.Setenv
// and may run in parallel; the tests that set a variable or a context of
// their own do it with t.Setenv (isolateNATSEnv), stay serial, and leave
// this environment as they found it.
func isolateProcessEnv(dir string) error {
	config := filepath.Join(dir, "config")
	if err := os.Mkdir(config, 0o700); err != nil {
		return err
	}
	if err := os.Setenv("XDG_CONFIG_HOME", config); err != nil {
		return err
	}
	for name := range (&connFlags{}).connEnv() {
		if err := os.Unsetenv(name); err != nil {
			return err
		}
	}
	return nil
}

// waitTimeout bounds every wait of the end-to-end tests: for a leader, a
// failover, a process to exit.
const waitTimeout = 30 * time.Second

// buildElection builds this command once for the run, for the tests that
// run it as a process.
func buildElection(t *testing.T) string {
	t.Helper()
	return buildOnce(t, "election", ".")
}

// built holds the binaries the tests build, each once for the whole run
// (building and linking one takes seconds).
var built struct {
	dir  string
	mu   sync.Mutex
	bins map[string]string // by package
}

// buildOnce returns the path of pkg's binary, named name, built on the
// first call for the package.
func buildOnce(t *testing.T, name, pkg string) string {
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

// TestDemoElectsAndFailsOverOnKeyDelete runs the demo on its embedded server,
// reads its JSON log, deletes the key from another client, and stops it as a
// signal would.
func TestDemoElectsAndFailsOverOnKeyDelete(t *testing.T) {
	t.Parallel()
	r, w := io.Pipe()
	log := logrus.New()
	log.SetOutput(w)
	log.SetFormatter(&logrus.JSONFormatter{})
	log.SetLevel(logrus.DebugLevel) // the library's own lines, such as its release, show at debug
	lines := make(chan map[string]any, 1024)
	go func() {
		defer close(lines)
		dec := json.NewDecoder(r)
		for {
			var line map[string]any
			if dec.Decode(&line) != nil {
				io.Copy(io.Discard, r)
				return
			}
			lines <- line
		}
	}()
	next := func(what string, match func(map[string]any) bool) map[string]any {
		t.Helper()
		timeout := time.After(time.Minute)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("log ended before %s", what)
				}
				if match(line) {
					return line
				}
			case <-timeout:
				t.Fatalf("no %s in the log within a minute", what)
			}
		}
	}
	event := func(name string) func(map[string]any) bool {
		return func(l map[string]any) bool { return l["event"] == name }
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, log, config{workers: 3, key: "demo", noSplay: true, ttl: 2 * time.Second})
		w.Close()
	}()

	started := next("embedded server URL", func(l map[string]any) bool { return l["url"] != nil })
	url := started["url"].(string)
	first := next("first leader", event("won"))
	if first["worker"] == nil || first["token"] == nil {
		t.Errorf("won event lacks worker or token: %v", first)
	}
	next("leader work", event("work"))

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(context.Background(), "demo"); err != nil {
		t.Fatal(err)
	}
	lost := next("stand-down after the key delete", event("lost"))
	if lost["worker"] != first["worker"] {
		t.Errorf("%v stood down, but %v led", lost["worker"], first["worker"])
	}
	second := next("next leader", event("won"))
	if second["token"].(float64) <= first["token"].(float64) {
		t.Errorf("token went from %v to %v", first["token"], second["token"])
	}

	stop()
	next("release on shutdown", func(l map[string]any) bool {
		msg, _ := l["msg"].(string)
		return strings.HasPrefix(msg, "released the key")
	})
	if err := <-done; err != nil {
		t.Fatalf("run returned %v after shutdown, want nil", err)
	}
}
