// Package natscause says what nats.go's generic errors mean about the path
// between a client and a bucket: "timeout", "no response from stream" and
// the API error code 10008 are what a stream without a leader, a cut link
// or a lost JetStream majority look like (docs/topologies.md, measured on
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

// The meanings Explain gives. They name what the client can tell apart:
// none of these errors says whether a gateway or a leaf node link lies on
// the way, so none presumes one.
const (
	// NoMetaQuorum is what ClusterNotAvailable means.
	NoMetaQuorum = "no JetStream meta leader reachable from this server (a majority of the JetStream servers down, " +
		"or cut off from this one, as a region cut off from a supercluster's majority is): " +
		"watchers and buckets cannot be created until it heals"
	// StreamUnreachable is what jetstream.ErrNoStreamResponse means: the
	// JetStream API answered, the bucket's stream did not.
	StreamUnreachable = "no server of the bucket's stream answered: the stream has no leader right now (its servers elect " +
		"one 4–9 s after its leader's server crashes or restarts), or its servers are cut off from this one"
	// NoReply is what a timeout means.
	NoReply = "no reply in time: the server, or the link to the bucket's servers, is slow or silently dead " +
		"(a silently dead link is noticed only by missed pings: docs/topologies.md)"
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
