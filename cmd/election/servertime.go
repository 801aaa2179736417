package main

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// serverTime returns a reading of the bucket's servers' wall clock: the
// time the server put on its answer to a status request, moved on since by
// this host's monotonic clock. A key's write times are stamped by the
// servers' clock, so an age computed against this reading carries no offset
// between this host's clock and theirs (only the bound between the
// servers'). Without a time in the answer, this host's clock.
func serverTime(ctx context.Context, kv jetstream.KeyValue) func() time.Time {
	status, err := kv.Status(ctx)
	asked := time.Now()
	if bs, ok := status.(*jetstream.KeyValueBucketStatus); err == nil && ok && bs.StreamInfo() != nil && !bs.StreamInfo().TimeStamp.IsZero() {
		at := bs.StreamInfo().TimeStamp
		return func() time.Time { return at.Add(time.Since(asked)) }
	}
	return time.Now
}
