package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvelect/election/mirror"
	"github.com/nats-io/nats.go/jetstream"
)

// defaultBucket is the bucket the commands use when --bucket is not given.
const defaultBucket = "ELECTIONS"

// bucketTimeout bounds the requests of the commands that open a bucket.
const bucketTimeout = 10 * time.Second

// openBucket binds to an existing bucket (its name checked by bucketFlag),
// with errors that say what to do; an error of a request made in a
// JetStream domain names the domain for hint.
func openBucket(ctx context.Context, js jetstream.JetStream, name string) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		create := "--ttl 10s"
		if nc := js.Conn(); nc != nil && nc.ConnectedClusterName() != "" {
			create = "--ttl 15s --replicas 3" // a cluster: a replicated bucket, with a TTL that rides out a stream-leader election
		}
		return nil, fmt.Errorf("bucket %q does not exist; create it with: election bucket create --bucket %s %s", name, name, create)
	case err != nil:
		return nil, inDomain(js, fmt.Errorf("opening bucket %q: %w", name, err))
	}
	return kv, nil
}

// clusterOf is the cluster a bucket's stream lives in, from its status: ""
// on a lone server (or a status that does not say).
func clusterOf(status jetstream.KeyValueStatus) string {
	bs, ok := status.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return ""
	}
	return streamCluster(bs.StreamInfo())
}

// streamCluster is the cluster a stream lives in, from its info: "" on a
// lone server.
func streamCluster(info *jetstream.StreamInfo) string {
	if info == nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Name
}

// observed is the bucket an observer (status, dashboard) reads: the
// election bucket itself, or a mirror of it.
type observed struct {
	kv     jetstream.KeyValue // for election.OpenBucket
	mirror *mirror.Mirror     // nil: the bucket itself
	// cluster is the cluster the election bucket lives in: "" on a lone
	// server, and with a mirror, which reads nothing of the bucket itself.
	cluster string
}

// openObserved opens bucket, or with mirrorName != "" the mirror of bucket
// of that name, checked to be one.
func openObserved(ctx context.Context, js jetstream.JetStream, bucket, mirrorName string) (observed, error) {
	if mirrorName != "" {
		m, err := openMirror(ctx, js, mirrorName, bucket)
		if err != nil {
			return observed{}, err
		}
		return observed{kv: m.KeyValue(), mirror: m}, nil
	}
	kv, err := openBucket(ctx, js, bucket)
	if err != nil {
		return observed{}, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return observed{}, fmt.Errorf("reading bucket %q: %w", bucket, err)
	}
	return observed{kv: kv, cluster: clusterOf(st)}, nil
}
