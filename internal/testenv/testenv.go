// Package testenv gives tests real embedded nats-servers, connections and
// election buckets, cleaned up when the test ends; polling; and, on Linux,
// ways to find the processes of a command a test runs.
package testenv

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/topology"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

// Server starts a single JetStream server for the test.
func Server(t testing.TB) *server.Server {
	t.Helper()
	s, err := embedded.Server(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { embedded.Shutdown(s) })
	return s
}

// ConfiguredServer starts a single server for the test with the options
// configure sets on top of Server's: authorization, TLS, a JetStream domain,
// leaf nodes.
func ConfiguredServer(t testing.TB, configure func(*server.Options)) *server.Server {
	t.Helper()
	s, err := embedded.Configured(t.TempDir(), configure)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { embedded.Shutdown(s) })
	return s
}

// clusterFormTimeout bounds how long Cluster's servers may take to form.
const clusterFormTimeout = 60 * time.Second

// Cluster starts a 3-node JetStream cluster named kvelect for the test, in
// this process and linked directly (topology.Cluster), and returns its
// servers once they have formed: routed to each other, with a meta leader
// that sees every other server current.
func Cluster(t testing.TB) []*server.Server {
	t.Helper()
	topo, err := topology.Cluster("kvelect", 3, topology.Options{Dir: t.TempDir(), Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*server.Server
	t.Cleanup(func() { embedded.Shutdown(nodes...) })
	for _, s := range topo.Servers {
		n, err := s.StartEmbedded()
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	if err := topo.AwaitFormed(context.Background(), clusterFormTimeout); err != nil {
		t.Fatal(err)
	}
	return nodes
}

// Connect opens a connection to url that keeps reconnecting quickly, and
// returns it with its JetStream context.
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Bucket creates (or binds to) an election bucket.
func Bucket(t testing.TB, js jetstream.JetStream, cfg jetstream.KeyValueConfig) jetstream.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		kv, err := js.CreateKeyValue(ctx, cfg)
		if err == nil {
			return kv
		}
		// A fresh cluster can refuse the first stream for a moment.
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jetstream.ErrNoStreamResponse) {
			t.Fatalf("creating bucket %s: %v", cfg.Bucket, err)
		}
	}
}

// VerifyNoLeaks runs the tests of a package, then the cleanups, then fails
// the run if any goroutine is left over. Use it from TestMain.
func VerifyNoLeaks(m *testing.M, cleanups ...func()) {
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	if code == 0 {
		// nats-server waits up to 30 s for the answer to a mirror's consumer
		// request on a goroutine that nothing stops, not even Shutdown: a
		// mirror made in a test's last 30 s outlives its server.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*stream).setupMirrorConsumer.func3")); err != nil {
			os.Stderr.WriteString("goroutines leaked: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// VerifyNoLeaksWithServer starts an embedded server for a package's
// examples, sets *url to its address, and runs the tests as VerifyNoLeaks
// does, shutting the server down before the leak check.
func VerifyNoLeaksWithServer(m *testing.M, url *string) {
	dir, err := os.MkdirTemp("", "kvelect-examples-")
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	s, err := embedded.Server(dir)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	*url = s.ClientURL()
	VerifyNoLeaks(m, func() {
		embedded.Shutdown(s)
		os.RemoveAll(dir)
	})
}
