// Package natscause says what nats.go's generic errors mean when the path
// between a client and a bucket crosses regions or a leaf node: "timeout",
// "no response from stream" and the API error code 10008 are what a cut
// supercluster or leaf link looks like (docs/topologies.md, measured on
// nats-server 2.15.2). The library's logs and the commands' errors both
// use it, so each meaning is stated once.
package natscause

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ClusterNotAvailable is the server's error code 10008, "JetStream system
// temporarily unavailable": the server reached no leader of the JetStream
// meta group, which every stream and consumer creation (a bucket, a KV
// watcher) needs. In a supercluster it means that this server's region is
// cut off from the majority of the JetStream servers, or that two regions
// split and neither has it.
const ClusterNotAvailable jetstream.ErrorCode = 10008

// The meanings Explain gives.
const (
	// NoMetaQuorum is what ClusterNotAvailable means.
	NoMetaQuorum = "no JetStream meta quorum reachable from this server's region (a region cut off from the majority, " +
		"or two regions split): watchers and buckets cannot be created until it heals"
	// StreamUnreachable is what jetstream.ErrNoStreamResponse means: the
	// JetStream API answered, the bucket's stream did not.
	StreamUnreachable = "no server of the bucket's stream answered: the bucket's cluster is unreachable from this server, " +
		"over a cut gateway or leaf node link"
	// NoReply is what a timeout means.
	NoReply = "no reply in time: the server, or the link to the bucket's region, is slow or silently dead; " +
		"a silent cut is noticed only by missed pings, within 15 s on a gateway and after the leaf server's " +
		"ping_interval (default 2 minutes) on a leaf node"
)

// Explain says what err means about the link between this client and a
// bucket, or "" if it is none of the errors above.
func Explain(err error) string {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode == ClusterNotAvailable:
		return NoMetaQuorum
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return StreamUnreachable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return NoReply
	}
	return ""
}
