package main

import (
	"context"
	"errors"
	"fmt"
	"time"

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
		return nil, fmt.Errorf("bucket %q does not exist; create it with: election bucket create --bucket %s --ttl 10s", name, name)
	case err != nil:
		return nil, inDomain(js, fmt.Errorf("opening bucket %q: %w", name, err))
	}
	return kv, nil
}
