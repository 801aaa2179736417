package cli

import (
	"encoding/json"
	"maps"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStatusShowsTheClustersAndWarnsOfCandidatesOutside runs, on a cluster
// of three servers named kvelect, a candidate that says it is in cluster C3
// (as one connected to another cluster of a supercluster would) and an
// election run process, which publishes the cluster its connection is on:
// status names the bucket's cluster, each candidate's and its round trip,
// and warns that the leader in C3 leads only while kvelect is reachable.
func TestStatusShowsTheClustersAndWarnsOfCandidatesOutside(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	nodes := testenv.Cluster(t)
	url := nodes[0].ClientURL()
	_, js := testenv.Connect(t, url)
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	w3 := candidatesWithMetadata(t, kv, "w3", "job", map[string]string{clusterKey: "C3"})
	testenv.Eventually(t, "w3 to lead", pollTimeout, w3.IsLeader)
	e2e.StartDaemon(t, bin, "r1", "-s", url, "--bucket", "E", "--key", "job", "--", "sleep", "60")

	var l leaderJSON
	testenv.Poll(t, "status --json to show r1's cluster", pollTimeout, func() (string, bool) {
		code, stdout, stderr := runCLI(t, "status", "-s", url, "--bucket", "E", "--key", "job", "--json")
		if code != 0 || stderr != "" {
			t.Fatalf("status --json: exit %d, stderr %q", code, stderr)
		}
		first, _, _ := strings.Cut(stdout, "\n")
		l = leaderJSON{}
		if err := json.Unmarshal([]byte(first), &l); err != nil {
			t.Fatalf("status --json line %q: %v", first, err)
		}
		return stdout, l.CandidateClusters["r1"] != "" && l.RoundTripsMS["r1"] > 0 && l.RoundTripsMS["w3"] > 0
	})
	outside := regexp.MustCompile(`^key job: w3 \(cluster C3, round trip [0-9.]+[µm]?s\) leads only while cluster kvelect is reachable$`)
	want := map[string]string{"r1": "kvelect", "w3": "C3"}
	if l.Leader != "w3" || l.BucketCluster != "kvelect" || l.Cluster != "C3" || !maps.Equal(l.CandidateClusters, want) ||
		len(l.Warnings) != 1 || !outside.MatchString(l.Warnings[0]) {
		t.Errorf("status --json: %+v; want leader w3 in C3, bucket in kvelect, candidates %v, and one warning for w3 with its round trip", l, want)
	}

	code, stdout, stderr := runCLI(t, "status", "-s", url, "--bucket", "E")
	if code != 0 || stderr != "" {
		t.Fatalf("status: exit %d, stderr %q", code, stderr)
	}
	wantLines(t, stdout,
		`^bucket E lives in cluster kvelect$`,
		`^KEY +LEADER +TOKEN +SINCE +REVISION +AGE +CANDIDATES$`,
		`^job +w3 +- +- +\d+ +\d+(\.\d+)?m?s +(w3@C3,r1@kvelect|r1@kvelect,w3@C3)$`,
		`^warning: key job: w3 \(cluster C3, round trip [0-9.]+[µm]?s\) leads only while cluster kvelect is reachable$`,
		`^watchers \(processes\): \d+$`)

	code, stdout, stderr = runCLI(t, "status", "-s", url, "--bucket", "E", "--json")
	if code != 0 || stderr != "" || !strings.Contains(stdout, `{"bucket":"E","cluster":"kvelect","watchers":`) {
		t.Errorf("status --json: exit %d, stdout %q, stderr %q; want the bucket's cluster on the last line", code, stdout, stderr)
	}
}

// TestALoneServerShowsNoClusters: on a lone server, a candidate publishes
// no cluster and status shows none.
func TestALoneServerShowsNoClusters(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	nc, js := testenv.Connect(t, url)
	if opts := clusterMetadata(nc); opts != nil {
		t.Errorf("clusterMetadata on a lone server: %d options, want none", len(opts))
	}
	if labels := withClusterLabel(map[string]string{"zone": "a"}, nc); !maps.Equal(labels, map[string]string{"zone": "a"}) {
		t.Errorf("withClusterLabel on a lone server: %v, want the labels unchanged", labels)
	}
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	e := candidatesWithMetadata(t, kv, "n0", "job", nil)
	testenv.Eventually(t, "n0 to lead", pollTimeout, e.IsLeader)
	code, stdout, stderr := runCLI(t, "status", "-s", url, "--bucket", "E", "--json")
	if code != 0 || stderr != "" || strings.Contains(stdout, "cluster") {
		t.Errorf("status --json on a lone server: exit %d, stdout %q, stderr %q; want no cluster", code, stdout, stderr)
	}
}

// TestClusterLabelKeepsTheNodesOwn: an agent labels its node with its
// cluster unless its labels name one.
func TestClusterLabelKeepsTheNodesOwn(t *testing.T) {
	t.Parallel()
	nodes := testenv.Cluster(t)
	nc, _ := testenv.Connect(t, nodes[0].ClientURL())
	given := map[string]string{"zone": "a"}
	if labels := withClusterLabel(given, nc); !maps.Equal(labels, map[string]string{"zone": "a", clusterKey: "kvelect"}) || len(given) != 1 {
		t.Errorf("withClusterLabel: %v (given now %v), want zone=a and cluster=kvelect, the given labels unchanged", labels, given)
	}
	own := map[string]string{clusterKey: "mine"}
	if labels := withClusterLabel(own, nc); !maps.Equal(labels, own) {
		t.Errorf("withClusterLabel with a cluster label: %v, want it kept", labels)
	}
}
