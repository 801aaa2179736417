package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestBucketCreatePlacementFlagsRefuseBadInput: a cluster name with spaces
// or wildcards, and an empty tag, are usage errors naming the flag and
// what it allows, before anything connects.
func TestBucketCreatePlacementFlagsRefuseBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--cluster", "C 1"}, `--cluster "C 1": want a cluster's name`},
		{[]string{"--cluster", "eu west"}, "without spaces or wildcards"},
		{[]string{"--cluster", "C*"}, `--cluster "C*"`},
		{[]string{"--cluster", ">"}, `--cluster ">"`},
		{[]string{"--cluster", ""}, `--cluster ""`},
		{[]string{"--tags", ""}, `--tags "": an empty tag`},
		{[]string{"--tags", "az:1,,ssd"}, "want server tags separated by commas, such as az:1,ssd"},
		{[]string{"--cluster", "C1", "--tags", "a b"}, `--tags "a b"`},
	} {
		args := append([]string{"bucket", "create", "-s", "nats://127.0.0.1:1", "--bucket", "B"}, c.args...)
		code, stdout, stderr := runCLI(t, args...)
		e2e.WantOneLineError(t, code, ExitUsage, stdout, stderr, c.says)
	}
	code, stdout, _ := runCLI(t, "bucket", "create", "--help")
	for _, says := range []string{"--cluster NAME", "--tags TAGS", "home region", "location:"} {
		if code != 0 || !strings.Contains(stdout, says) {
			t.Errorf("bucket create --help (exit %d) does not say %q", code, says)
		}
	}
}

// TestPlacementFlagsParse: tags are trimmed and each kept once, and a
// cluster's name may have dots, as nats-server allows.
func TestPlacementFlagsParse(t *testing.T) {
	t.Parallel()
	if got, err := (&placementFlags{cluster: "eu.west"}).placement(map[string]bool{"cluster": true}); err != nil || got.Cluster != "eu.west" {
		t.Errorf("placement of --cluster eu.west: %+v, %v; want cluster eu.west", got, err)
	}
	p := placementFlags{cluster: "C1", tags: " az:1, ssd ,az:1"}
	got, err := p.placement(map[string]bool{"cluster": true, "tags": true})
	if err != nil || got.Cluster != "C1" || !slices.Equal(got.Tags, []string{"az:1", "ssd"}) {
		t.Errorf("placement %+v, %v; want cluster C1, tags az:1 and ssd once each", got, err)
	}
	if got, err := p.placement(map[string]bool{}); got != nil || err != nil {
		t.Errorf("no flags given: placement %+v, %v; want none", got, err)
	}
}

// TestLocationSaysWhereTheBucketLives builds the stream info a supercluster
// and a leaf node give and checks bucket check's location lines.
func TestLocationSaysWhereTheBucketLives(t *testing.T) {
	t.Parallel()
	r3 := &jetstream.StreamInfo{
		Config: jetstream.StreamConfig{Placement: &jetstream.Placement{Cluster: "C1", Tags: []string{"ssd"}}},
		Cluster: &jetstream.ClusterInfo{Name: "C1", Leader: "c1-a", Replicas: []*jetstream.PeerInfo{
			{Name: "c1-b", Current: true}, {Name: "c1-c", Offline: true}}},
	}
	for _, c := range []struct {
		name string
		info *jetstream.StreamInfo
		from site
		want []string
	}{
		{"home region", r3, site{cluster: "C1"},
			[]string{`location: cluster C1, stream leader c1-a, replicas c1-b (current), c1-c (offline); placed by cluster "C1" on servers tagged ssd`}},
		{"another region", r3, site{cluster: "C3"}, []string{
			`location: cluster C1, stream leader c1-a, replicas c1-b (current), c1-c (offline); placed by cluster "C1" on servers tagged ssd`,
			"location: this client is connected to cluster C3: candidates connected to cluster C3 lead only while cluster C1 is reachable"}},
		{"through a domain", &jetstream.StreamInfo{Cluster: &jetstream.ClusterInfo{Leader: "hub"}}, site{domain: "hub"}, []string{
			"location: JetStream domain hub: candidates that reach the bucket through this domain lead only while it is reachable from their server"}},
		{"a server in no cluster", &jetstream.StreamInfo{Cluster: &jetstream.ClusterInfo{Leader: "s"}}, site{}, nil},
		{"a server in no cluster, placed", &jetstream.StreamInfo{Config: jetstream.StreamConfig{Placement: &jetstream.Placement{Cluster: "C1"}}}, site{},
			[]string{`location: a server in no cluster, which ignores the placement asked (cluster "C1")`}},
	} {
		if got := location(c.info, c.from); !slices.Equal(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

func TestPlacementDiffers(t *testing.T) {
	t.Parallel()
	info := &jetstream.StreamInfo{
		Config:  jetstream.StreamConfig{Placement: &jetstream.Placement{Tags: []string{"SSD", "az:1"}}},
		Cluster: &jetstream.ClusterInfo{Name: "C1"},
	}
	all := map[string]bool{"cluster": true, "tags": true}
	if d := placementDiffers(info, &jetstream.Placement{Cluster: "C1", Tags: []string{"az:1", "ssd"}}, all); d != nil {
		t.Errorf("the same placement (tags in another order and case) differs: %q", d)
	}
	d := placementDiffers(info, &jetstream.Placement{Cluster: "C2", Tags: []string{"hdd"}}, all)
	want := []string{"cluster C1, not --cluster C2", "placement tags SSD,az:1, not --tags hdd"}
	if !slices.Equal(d, want) {
		t.Errorf("differs %q, want %q", d, want)
	}
	if d := placementDiffers(info, nil, all); d != nil {
		t.Errorf("no placement asked, yet differs: %q", d)
	}
}

// TestPlacementOnAServerInNoCluster: a lone server takes a placement and
// ignores it; bucket create says so, and the bucket works.
func TestPlacementOnAServerInNoCluster(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	code, stdout, stderr := runCLI(t, "bucket", "create", "-s", s.ClientURL(), "--bucket", "LONE", "--ttl", "2s", "--history", "0", "--cluster", "C1")
	if code != 0 || !strings.Contains(stdout, `location: a server in no cluster, which ignores the placement asked (cluster "C1")`) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	_, js := testenv.Connect(t, s.ClientURL())
	if _, err := js.KeyValue(t.Context(), "LONE"); err != nil {
		t.Error(err)
	}
}
