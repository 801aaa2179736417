//go:build unix

package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// runServer is one nats-server process: the harness runs itself with
// "server" so that it can SIGKILL and restart servers. It prints "ready" once
// it accepts clients, and shuts down gracefully on SIGTERM.
func runServer(args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	name := fs.String("name", "n1", "server name")
	port := fs.Int("port", 0, "client port")
	store := fs.String("store", "", "JetStream store directory")
	cluster := fs.String("cluster", "", "cluster name; empty runs a single server")
	clusterPort := fs.Int("cluster-port", 0, "cluster port")
	routes := fs.String("routes", "", "cluster routes, comma separated")
	syncAlways := fs.Bool("sync-always", false, "fsync every write before acknowledging it")
	monitor := fs.Int("monitor-port", 0, "HTTP monitoring port (/jsz), 0 for none")
	advertise := fs.String("cluster-advertise", "", "the route address gossiped to other servers")
	gateway := fs.String("gateway", "", "gateway (region) name; empty for none")
	gatewayPort := fs.Int("gateway-port", 0, "gateway port")
	gateways := fs.String("gateways", "", "the other regions' gateway URLs: REGION=URL, comma separated")
	gatewayAdvertise := fs.String("gateway-advertise", "", "the gateway address gossiped to other regions")
	domain := fs.String("domain", "", "JetStream domain; empty for none")
	leafPort := fs.Int("leaf-port", 0, "port accepting leaf node connections (0: none)")
	leafRemote := fs.String("leaf-remote", "", "URL of the hub's leaf node port to link to, as a leaf (empty: none)")
	ping := fs.Duration("ping-interval", 0, "the server's ping interval, for its clients and its leaf node link (0: the default, 2 minutes)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := &server.Options{
		ServerName: *name,
		Host:       "127.0.0.1",
		Port:       *port,
		JetStream:  true,
		StoreDir:   *store,
		SyncAlways: *syncAlways,
		HTTPHost:   "127.0.0.1",
		HTTPPort:   *monitor,
		NoLog:      true,
		NoSigs:     true,
	}
	if *cluster != "" {
		// NoAdvertise: clients reach servers only through the harness's proxies.
		opts.Cluster = server.ClusterOpts{Name: *cluster, Host: "127.0.0.1", Port: *clusterPort, NoAdvertise: true, Advertise: *advertise}
		opts.Routes = server.RoutesFromStr(*routes)
	}
	if *gateway != "" {
		server.SetGatewaysSolicitDelay(10 * time.Millisecond) // a supercluster forms in well under a second
		opts.Gateway = server.GatewayOpts{Name: *gateway, Host: "127.0.0.1", Port: *gatewayPort, Advertise: *gatewayAdvertise}
		for _, gw := range strings.Split(*gateways, ",") {
			region, addr, ok := strings.Cut(gw, "=")
			u, err := url.Parse(addr)
			if !ok || err != nil {
				return fmt.Errorf("-gateways: %q is not REGION=URL", gw)
			}
			opts.Gateway.Gateways = append(opts.Gateway.Gateways, &server.RemoteGatewayOpts{Name: region, URLs: []*url.URL{u}})
		}
	}
	opts.JetStreamDomain = *domain
	opts.PingInterval = *ping
	if *leafPort != 0 {
		opts.LeafNode = server.LeafNodeOpts{Host: "127.0.0.1", Port: *leafPort}
	}
	if *leafRemote != "" {
		u, err := url.Parse(*leafRemote)
		if err != nil {
			return fmt.Errorf("-leaf-remote: %w", err)
		}
		// IgnoreDiscoveredServers: the hub's INFO names its own leaf node
		// address, and a leaf that learnt it could reconnect around the
		// harness's proxy.
		opts.LeafNode = server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}, IgnoreDiscoveredServers: true}}}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		return fmt.Errorf("server %s not ready after 30s", *name)
	}
	fmt.Println("ready")

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}
