package election

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// write puts value on the key if the key's last revision is still expected
// (0: no entry at all), and returns the new revision. An election with a TTL
// of its own (WithKeyTTL) publishes to the bucket's subject with that TTL,
// which the KV Update call would drop.
func (e *Election) write(ctx context.Context, value string, expected uint64) (uint64, error) {
	if e.opts.keyTTL == 0 {
		return e.kv.Update(ctx, e.key, []byte(value), expected)
	}
	ack, err := e.opts.js.Publish(ctx, "$KV."+e.kv.Bucket()+"."+e.key, []byte(value),
		jetstream.WithExpectLastSequencePerSubject(expected), jetstream.WithMsgTTL(e.opts.keyTTL))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}
