package cli

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
)

// TestMain runs the tests, or the guard of a COMMAND when a test's election
// run starts this test binary again as its guard.
func TestMain(m *testing.M) { e2e.Main(m, ConnEnv()) }

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
