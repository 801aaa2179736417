package topology_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/faultproxy"
	"github.com/kvelect/election/internal/testenv"
	"github.com/kvelect/election/internal/topology"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) {
	topology.ServeIfAsked()
	testenv.VerifyNoLeaks(m)
}

// formTimeout bounds how long a topology of the tests may take to form.
const formTimeout = 60 * time.Second

// startEmbedded starts every server of topo in this process and waits until
// they have formed; all stop, and the proxies close, when the test ends.
func startEmbedded(t *testing.T, topo *topology.Topology) map[string]*server.Server {
	t.Helper()
	t.Cleanup(topo.Close)
	servers := map[string]*server.Server{}
	t.Cleanup(func() {
		for _, s := range servers {
			embedded.Shutdown(s)
		}
	})
	for _, s := range topo.Servers {
		srv, err := s.StartEmbedded()
		if err != nil {
			t.Fatal(err)
		}
		servers[s.Name] = srv
	}
	if err := topo.AwaitFormed(context.Background(), formTimeout); err != nil {
		t.Fatal(err)
	}
	return servers
}

// TestConfigSaysWhatTheEmbeddedOptionsSay parses every server's
// configuration file, as a standalone nats-server would, and compares what
// it sets with the options of the same server started in this process.
func TestConfigSaysWhatTheEmbeddedOptionsSay(t *testing.T) {
	dir := t.TempDir()
	sc, err := topology.Supercluster([]int{2, 1}, topology.Options{Dir: dir, SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	leaf, err := topology.Leaf(topology.Options{Dir: dir, Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	leaf.Servers[1].PingInterval = time.Second
	leaf.Servers[0].Tags = []string{"region:hub"}
	leaf.Servers[0].Accounts, leaf.Servers[0].SystemAccount = testAccounts, "SYS"
	for _, s := range append(sc.Servers, leaf.Servers...) {
		file := filepath.Join(dir, s.Name+".conf")
		if err := os.WriteFile(file, []byte(s.Config()), 0o600); err != nil {
			t.Fatal(err)
		}
		fromFile, err := server.ProcessConfigFile(file)
		if err != nil {
			t.Fatalf("%s: %v\n%s", s.Name, err, s.Config())
		}
		want := &server.Options{}
		topology.Configure(s, want)
		for _, f := range []struct {
			name      string
			got, want any
		}{
			{"server name", fromFile.ServerName, want.ServerName},
			{"client port", fromFile.Port, want.Port},
			{"monitoring port", fromFile.HTTPPort, want.HTTPPort},
			{"store", fromFile.StoreDir, want.StoreDir},
			{"sync always", fromFile.SyncAlways, want.SyncAlways},
			{"domain", fromFile.JetStreamDomain, want.JetStreamDomain},
			{"tags", []string(fromFile.Tags), []string(want.Tags)},
			{"ping interval", fromFile.PingInterval, want.PingInterval},
			{"cluster", fromFile.Cluster.Name, want.Cluster.Name},
			{"cluster port", fromFile.Cluster.Port, want.Cluster.Port},
			{"cluster advertise", fromFile.Cluster.Advertise, want.Cluster.Advertise},
			{"routes", fromFile.Routes, want.Routes},
			{"gateway", fromFile.Gateway.Name, want.Gateway.Name},
			{"gateway port", fromFile.Gateway.Port, want.Gateway.Port},
			{"gateway advertise", fromFile.Gateway.Advertise, want.Gateway.Advertise},
			{"leaf port", fromFile.LeafNode.Port, want.LeafNode.Port},
			{"accounts", accountNames(fromFile), accountNames(want)},
			{"users", users(fromFile), users(want)},
			{"system account", fromFile.SystemAccount, want.SystemAccount},
		} {
			if !reflect.DeepEqual(f.got, f.want) {
				t.Errorf("%s: %s from the file %v, embedded %v", s.Name, f.name, f.got, f.want)
			}
		}
		if len(fromFile.Gateway.Gateways) != len(want.Gateway.Gateways) {
			t.Errorf("%s: %d remote gateways from the file, embedded %d", s.Name, len(fromFile.Gateway.Gateways), len(want.Gateway.Gateways))
		}
		for i, gw := range want.Gateway.Gateways {
			if i < len(fromFile.Gateway.Gateways) && (fromFile.Gateway.Gateways[i].Name != gw.Name || !reflect.DeepEqual(fromFile.Gateway.Gateways[i].URLs, gw.URLs)) {
				t.Errorf("%s: remote gateway %d from the file %+v, embedded %+v", s.Name, i, fromFile.Gateway.Gateways[i], gw)
			}
		}
		if len(fromFile.LeafNode.Remotes) != len(want.LeafNode.Remotes) {
			t.Errorf("%s: %d leaf remotes from the file, embedded %d", s.Name, len(fromFile.LeafNode.Remotes), len(want.LeafNode.Remotes))
		}
		for i, r := range want.LeafNode.Remotes {
			if i < len(fromFile.LeafNode.Remotes) && (!reflect.DeepEqual(fromFile.LeafNode.Remotes[i].URLs, r.URLs) || !fromFile.LeafNode.Remotes[i].IgnoreDiscoveredServers) {
				t.Errorf("%s: leaf remote %d from the file %+v, embedded %+v", s.Name, i, fromFile.LeafNode.Remotes[i], r)
			}
		}
	}
}

// testAccounts are an account with JetStream and two users, one of whom
// may not publish to $SYS subjects, and a system account.
var testAccounts = []topology.Account{
	{Name: "APP", JetStream: true, Users: []topology.User{
		{Name: "app", Password: "s3cret"},
		{Name: "limited", Password: "s3cret", DenyPublish: []string{"$SYS.>"}},
	}},
	{Name: "SYS", Users: []topology.User{{Name: "sys", Password: "s3cret"}}},
}

// accountNames returns the names of the accounts o configures, in order
// (the parser takes them from a map).
func accountNames(o *server.Options) []string {
	var names []string
	for _, a := range o.Accounts {
		names = append(names, a.GetName())
	}
	slices.Sort(names)
	return names
}

// users returns the users o configures, each with its password, account
// and the subjects it may not publish to, in order.
func users(o *server.Options) []string {
	var list []string
	for _, u := range o.Users {
		var deny []string
		if u.Permissions != nil && u.Permissions.Publish != nil {
			deny = u.Permissions.Publish.Deny
		}
		list = append(list, fmt.Sprintf("%s:%s@%s deny %v", u.Username, u.Password, u.Account.GetName(), deny))
	}
	slices.Sort(list)
	return list
}

// TestAccountsLetTheirUsersIn starts a server with accounts in this process:
// a user of the account with JetStream uses it, a user of the system
// account sees its account's name, and a client without a user is refused.
func TestAccountsLetTheirUsersIn(t *testing.T) {
	t.Parallel()
	topo, err := topology.Single(topology.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s := topo.Servers[0]
	s.Accounts, s.SystemAccount = testAccounts, "SYS"
	startEmbedded(t, topo)
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("app", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(context.Background()); err != nil {
		t.Errorf("app's account without JetStream: %v", err)
	}
	sys, err := nats.Connect(s.ClientURL(), nats.UserInfo("sys", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	var info struct {
		Data struct {
			Account string `json:"account"`
		} `json:"data"`
	}
	msg, err := sys.Request("$SYS.REQ.USER.INFO", nil, formTimeout)
	if err != nil || json.Unmarshal(msg.Data, &info) != nil || info.Data.Account != "SYS" {
		t.Errorf("sys's user info %+v (%v), want account SYS", info, err)
	}
	if nc, err := nats.Connect(s.ClientURL()); err == nil {
		nc.Close()
		t.Error("a client without a user got in")
	}
}

// TestClusterFormsAndARouteCutIsSeen forms a cluster of three whose routes
// cross proxies, cuts one server off its peers loudly, sees the others lose
// their routes to it, heals, and sees the cluster whole again.
func TestClusterFormsAndARouteCutIsSeen(t *testing.T) {
	t.Parallel()
	topo, err := topology.Cluster("kit", 3, topology.Options{Dir: t.TempDir(), ProxyRoutes: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(topo.Links); got != 6 {
		t.Fatalf("%d route links, want 6 (one per server and peer)", got)
	}
	servers := startEmbedded(t, topo)
	topo.IsolateServer("n1", (*faultproxy.Proxy).Refuse)
	testenv.Eventually(t, "n2 and n3 without a route to n1", formTimeout, func() bool {
		return !routedTo(servers["n2"], "n1") && !routedTo(servers["n3"], "n1") && routedTo(servers["n2"], "n3")
	})
	if formed, _ := topo.Formed(); formed {
		t.Error("the cluster counts as formed with n1 cut off")
	}
	topo.Heal()
	if err := topo.AwaitFormed(context.Background(), formTimeout); err != nil {
		t.Fatal(err)
	}
}

// routedTo reports whether s has a route to the server named peer.
func routedTo(s *server.Server, peer string) bool {
	routes, err := s.Routez(nil)
	if err != nil {
		return false
	}
	for _, r := range routes.Routes {
		if r.RemoteName == peer {
			return true
		}
	}
	return false
}

// TestSuperclusterFormsAndARegionCutIsSeen forms two regions joined by
// gateways through proxies, cuts C2 off loudly, sees C1 lose its gateway,
// heals, and sees the supercluster whole again.
func TestSuperclusterFormsAndARegionCutIsSeen(t *testing.T) {
	t.Parallel()
	topo, err := topology.Supercluster([]int{1, 1}, topology.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := topo.ClientURLs("C2"), topo.Server("C2-S1").ClientURL(); got != want {
		t.Errorf("C2's client URLs %q, want %q", got, want)
	}
	servers := startEmbedded(t, topo)
	topo.IsolateRegion("C2", (*faultproxy.Proxy).Refuse)
	testenv.Eventually(t, "C1 without a gateway to C2", formTimeout, func() bool {
		return servers["C1-S1"].NumOutboundGateways() == 0
	})
	topo.Heal()
	if err := topo.AwaitFormed(context.Background(), formTimeout); err != nil {
		t.Fatal(err)
	}
}

// TestLeafServerInAChildProcessIsKilledAndStartsAgain runs the hub in this
// process and the leaf node server in a child process (Self), kills the
// child, sees the hub lose its leaf, starts the child again and sees the
// link back.
func TestLeafServerInAChildProcessIsKilledAndStartsAgain(t *testing.T) {
	t.Parallel()
	topo, err := topology.Leaf(topology.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(topo.Close)
	hub, err := topo.Server("hub").StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { embedded.Shutdown(hub) })
	leaf := topology.NewProcess(topo.Server("leaf"), topology.Self(), os.Stderr)
	if err := leaf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(leaf.Stop)
	if err := topo.AwaitFormed(context.Background(), formTimeout); err != nil {
		t.Fatal(err)
	}
	leaf.Kill()
	select {
	case <-leaf.Done():
	default:
		t.Fatal("Kill returned before the process exited")
	}
	testenv.Eventually(t, "the hub without its leaf", formTimeout, func() bool { return hub.NumLeafNodes() == 0 })
	if err := leaf.Start(); err != nil {
		t.Fatal(err)
	}
	if err := topo.AwaitFormed(context.Background(), formTimeout); err != nil {
		t.Fatal(err)
	}
}
