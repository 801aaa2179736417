package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
)

// TestAMissingBucketsHintFitsTheServer: the command a missing bucket's
// error suggests makes a replicated bucket, with a TTL that rides out a
// stream-leader election, when the server is in a cluster, and a plain one
// on a lone server.
func TestAMissingBucketsHintFitsTheServer(t *testing.T) {
	t.Parallel()
	_, lone := testenv.Connect(t, testenv.Server(t).ClientURL())
	_, clustered := testenv.Connect(t, embedded.ClientURLs(testenv.Cluster(t)))
	if _, err := openBucket(context.Background(), lone, "NOPE"); err == nil || !strings.HasSuffix(err.Error(), "election bucket create --bucket NOPE --ttl 10s") {
		t.Errorf("on a lone server: %v", err)
	}
	if _, err := openBucket(context.Background(), clustered, "NOPE"); err == nil || !strings.HasSuffix(err.Error(), "election bucket create --bucket NOPE --ttl 15s --replicas 3") {
		t.Errorf("on a cluster: %v", err)
	}
}
