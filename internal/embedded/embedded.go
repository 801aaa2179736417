// Package embedded starts JetStream nats-server instances inside the process,
// on free loopback ports: for tests, the demo and the chaos harness.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyTimeout bounds how long a server, or a cluster, may take to start.
const readyTimeout = 30 * time.Second

// Server starts a single JetStream server storing its data in dir.
func Server(dir string) (*server.Server, error) {
	return Configured(dir, func(*server.Options) {})
}

// Configured starts a single server as Server does, with the options
// configure sets on top: authorization, TLS, a JetStream domain, leaf nodes.
func Configured(dir string, configure func(*server.Options)) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "n1",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	}
	configure(opts)
	return start(opts)
}

// Cluster starts one JetStream server per directory in dirs, clustered over
// loopback routes, and returns once they have elected a meta leader and every
// node is current.
func Cluster(name string, dirs []string) ([]*server.Server, error) {
	ports, err := FreePorts(len(dirs))
	if err != nil {
		return nil, err
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	var nodes []*server.Server
	for i, dir := range dirs {
		s, err := start(&server.Options{
			ServerName: fmt.Sprintf("%s-n%d", name, i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   dir,
			NoLog:      true,
			NoSigs:     true,
			Cluster:    server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: ports[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
		})
		if err != nil {
			Shutdown(nodes...)
			return nil, err
		}
		nodes = append(nodes, s)
	}
	if err := waitClusterReady(nodes); err != nil {
		Shutdown(nodes...)
		return nil, err
	}
	return nodes, nil
}

// ClientURLs returns the servers' client URLs joined by commas, as
// nats.Connect takes them.
func ClientURLs(nodes []*server.Server) string {
	urls := make([]string, len(nodes))
	for i, s := range nodes {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Shutdown stops the servers and waits until they have stopped.
func Shutdown(nodes ...*server.Server) {
	for _, s := range nodes {
		s.Shutdown()
	}
	for _, s := range nodes {
		s.WaitForShutdown()
	}
}

func start(opts *server.Options) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		Shutdown(s)
		return nil, fmt.Errorf("embedded nats-server %s: not ready for connections after %v", opts.ServerName, readyTimeout)
	}
	return s, nil
}

func waitClusterReady(nodes []*server.Server) error {
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		if clusterReady(nodes) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("embedded nats-server cluster: no meta leader with all peers current after " + readyTimeout.String())
}

func clusterReady(nodes []*server.Server) bool {
	leader := false
	for _, s := range nodes {
		if !s.JetStreamIsCurrent() {
			return false
		}
		if s.JetStreamIsLeader() {
			leader = len(s.JetStreamClusterPeers()) == len(nodes)
		}
	}
	return leader
}

// FreePorts finds n free loopback ports and releases them for the caller, for
// servers whose ports must be known before they start (cluster routes,
// restarts on the same port).
func FreePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserving a loopback port: %w", err)
		}
		listeners = append(listeners, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
