package topology

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/kvelect/election/internal/embedded"
	"github.com/nats-io/nats-server/v2/server"
)

// Server is how one nats-server of a topology is configured. The builders
// (Single, Cluster, Supercluster, Leaf) fill it in; a caller may change a
// field (a name, tags, a ping interval, accounts) before the server starts.
type Server struct {
	Name   string // the server's name, as JetStream and the monitoring endpoints give it
	Region string // the cluster of a supercluster (C1, C2, …), hub or leaf; "" otherwise
	// StoreDir is the server's JetStream store.
	StoreDir    string
	ClientPort  int // on 127.0.0.1, as are every port's listeners
	MonitorPort int // HTTP monitoring (/varz, /jsz, /healthz …)
	// SyncAlways makes the server fsync every write before it acknowledges
	// it; nats-server's default syncs every 2 minutes.
	SyncAlways bool
	Tags       []string // server tags, for placement ("region:C1")
	// Cluster names the server's cluster; "" for a server of its own.
	Cluster     string
	ClusterPort int      // the route listener
	Routes      []string // nats-route:// URLs, the server's own among them
	// ClusterAdvertise is the route address gossiped to the cluster's
	// other servers ("" for the listener's own).
	ClusterAdvertise string
	// GatewayPort listens for the other regions' gateways (0: no gateway).
	GatewayPort      int
	GatewayAdvertise string              // the gateway address gossiped to other regions
	Gateways         map[string][]string // the other regions' gateway URLs, by region
	// Domain is the server's JetStream domain ("" for none).
	Domain string
	// LeafPort listens for leaf node connections (0: none).
	LeafPort int
	// LeafRemote is the nats-leaf:// URL of the hub this server links to as a
	// leaf node ("" for none). The link ignores the other URLs the hub
	// names, so that it cannot go around a proxy.
	LeafRemote string
	// PingInterval is the server's ping interval, for its clients and its
	// leaf node link (0: nats-server's default, 2 minutes).
	PingInterval time.Duration
	// Accounts are the server's accounts and their users; with none, every
	// client is in the global account, without logging in.
	Accounts []Account
	// SystemAccount names the account of Accounts that is the system
	// account ("" for nats-server's own, $SYS).
	SystemAccount string
}

// Account is an account of a server, with its users.
type Account struct {
	Name      string
	JetStream bool // the account's users may use JetStream
	Users     []User
}

// User is a user of an account, who logs in with a password.
type User struct {
	Name, Password string
	// DenyPublish lists the subjects the user may not publish to (none:
	// it may publish to any).
	DenyPublish []string
}

// ClientURL returns the server's client URL.
func (s *Server) ClientURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.ClientPort) }

// configure sets the options s describes on o.
func (s *Server) configure(o *server.Options) {
	o.ServerName = s.Name
	o.Host, o.Port = "127.0.0.1", s.ClientPort
	o.HTTPHost, o.HTTPPort = "127.0.0.1", s.MonitorPort
	o.JetStream, o.StoreDir, o.SyncAlways = true, s.StoreDir, s.SyncAlways
	o.JetStreamDomain = s.Domain
	o.Tags = s.Tags
	o.PingInterval = s.PingInterval
	if s.Cluster != "" {
		// NoAdvertise: clients reach the servers they are given, never one
		// the cluster told them of.
		o.Cluster = server.ClusterOpts{Name: s.Cluster, Host: "127.0.0.1", Port: s.ClusterPort, NoAdvertise: true, Advertise: s.ClusterAdvertise}
		o.Routes = server.RoutesFromStr(strings.Join(s.Routes, ","))
	}
	if s.GatewayPort != 0 {
		o.Gateway = server.GatewayOpts{Name: s.Region, Host: "127.0.0.1", Port: s.GatewayPort, Advertise: s.GatewayAdvertise}
		for _, region := range sortedKeys(s.Gateways) {
			gw := &server.RemoteGatewayOpts{Name: region}
			for _, u := range s.Gateways[region] {
				gw.URLs = append(gw.URLs, mustParse(u))
			}
			o.Gateway.Gateways = append(o.Gateway.Gateways, gw)
		}
	}
	if s.LeafPort != 0 {
		o.LeafNode = server.LeafNodeOpts{Host: "127.0.0.1", Port: s.LeafPort}
	}
	if s.LeafRemote != "" {
		o.LeafNode.Remotes = []*server.RemoteLeafOpts{{URLs: []*url.URL{mustParse(s.LeafRemote)}, IgnoreDiscoveredServers: true}}
	}
	if accounts := s.accountsConfig(); accounts != "" {
		// An account made in Go cannot be given JetStream before its
		// server starts (the switch is unexported), so the server takes its
		// accounts from the block Config writes.
		if err := o.ProcessConfigString(accounts); err != nil {
			panic(fmt.Sprintf("topology: the accounts of %s: %v\n%s", s.Name, err, accounts))
		}
	}
}

// accountsConfig returns the server's accounts and system account as a
// configuration file's lines, "" if it has none.
func (s *Server) accountsConfig() string {
	var b strings.Builder
	if len(s.Accounts) > 0 {
		b.WriteString("accounts {\n")
		for _, a := range s.Accounts {
			fmt.Fprintf(&b, "  %q {\n", a.Name)
			if a.JetStream {
				b.WriteString("    jetstream: enabled\n")
			}
			b.WriteString("    users: [\n")
			for _, u := range a.Users {
				fmt.Fprintf(&b, "      {user: %q, password: %q", u.Name, u.Password)
				if len(u.DenyPublish) > 0 {
					fmt.Fprintf(&b, ", permissions: {publish: {deny: %s}}", quoted(u.DenyPublish))
				}
				b.WriteString("}\n")
			}
			b.WriteString("    ]\n  }\n")
		}
		b.WriteString("}\n")
	}
	if s.SystemAccount != "" {
		fmt.Fprintf(&b, "system_account: %q\n", s.SystemAccount)
	}
	return b.String()
}

// mustParse parses a URL the builders made.
func mustParse(u string) *url.URL {
	parsed, err := url.Parse(u)
	if err != nil {
		panic(fmt.Sprintf("topology: URL %q: %v", u, err))
	}
	return parsed
}

// StartEmbedded starts the server in this process and returns once it takes
// clients.
func (s *Server) StartEmbedded() (*server.Server, error) {
	if s.GatewayPort != 0 {
		// Gateways then form in well under a second instead of after a
		// second's delay; the setting is nats-server's, process-wide.
		server.SetGatewaysSolicitDelay(10 * time.Millisecond)
	}
	return embedded.Configured(s.StoreDir, s.configure)
}

// Config returns the server as a nats-server configuration file, for a
// standalone nats-server process (Binary).
func (s *Server) Config() string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %q\nlisten: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\n", s.Name, s.ClientPort, s.MonitorPort)
	if len(s.Tags) > 0 {
		fmt.Fprintf(&b, "server_tags: %s\n", quoted(s.Tags))
	}
	if s.PingInterval != 0 {
		fmt.Fprintf(&b, "ping_interval: %q\n", s.PingInterval.String())
	}
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", s.StoreDir)
	if s.Domain != "" {
		fmt.Fprintf(&b, "  domain: %q\n", s.Domain)
	}
	if s.SyncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	if s.Cluster != "" {
		fmt.Fprintf(&b, "cluster {\n  name: %q\n  listen: \"127.0.0.1:%d\"\n  routes: %s\n  no_advertise: true\n", s.Cluster, s.ClusterPort, quoted(s.Routes))
		if s.ClusterAdvertise != "" {
			fmt.Fprintf(&b, "  advertise: %q\n", s.ClusterAdvertise)
		}
		b.WriteString("}\n")
	}
	if s.GatewayPort != 0 {
		fmt.Fprintf(&b, "gateway {\n  name: %q\n  listen: \"127.0.0.1:%d\"\n", s.Region, s.GatewayPort)
		if s.GatewayAdvertise != "" {
			fmt.Fprintf(&b, "  advertise: %q\n", s.GatewayAdvertise)
		}
		b.WriteString("  gateways: [\n")
		for _, region := range sortedKeys(s.Gateways) {
			fmt.Fprintf(&b, "    {name: %q, urls: %s}\n", region, quoted(s.Gateways[region]))
		}
		b.WriteString("  ]\n}\n")
	}
	switch {
	case s.LeafPort != 0:
		fmt.Fprintf(&b, "leafnodes {\n  listen: \"127.0.0.1:%d\"\n}\n", s.LeafPort)
	case s.LeafRemote != "":
		fmt.Fprintf(&b, "leafnodes {\n  remotes: [{url: %q, ignore_discovered_servers: true}]\n}\n", s.LeafRemote)
	}
	b.WriteString(s.accountsConfig())
	return b.String()
}

// quoted returns list as a configuration file's array of strings.
func quoted(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Monitor decodes into v what the server's HTTP monitoring endpoint path
// ("/jsz", "/connz?subs=detail" …) answers, or returns why it could not.
func (s *Server) Monitor(path string, v any) error {
	client := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", s.MonitorPort, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", s.Name, path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
