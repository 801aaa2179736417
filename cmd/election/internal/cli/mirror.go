package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvelect/election/mirror"
	"github.com/nats-io/nats.go/jetstream"
)

// An observer over a mirror: election status --mirror M and election
// dashboard --mirror M read a KV mirror of the election bucket B through
// the package mirror, in a remote region, say. What a mirror says may be
// stale by any amount: the observers label all of it as not authoritative
// and show the mirror's lag.

// openMirror opens the mirror named name of bucket, with what is wrong
// said as for --mirror.
func openMirror(ctx context.Context, js jetstream.JetStream, name, bucket string) (*mirror.Mirror, error) {
	m, err := mirror.Open(ctx, js, name, bucket)
	var origin *mirror.OriginError
	switch {
	case errors.As(err, &origin):
		return nil, fmt.Errorf("--mirror %s: %v (--bucket); pass --bucket %s, or the mirror of %q", name, err, origin.Origin, bucket)
	case err != nil:
		return nil, fmt.Errorf("--mirror %s: %w", name, err)
	}
	return m, nil
}

// notAuthoritative is the line that says where what follows comes from.
func notAuthoritative(m *mirror.Mirror) string {
	return fmt.Sprintf("from mirror %s of bucket %s: not authoritative, may be stale", m.Name(), m.Bucket())
}

// describeMirrorLag tells the lag: "lag 0 messages, last heard from bucket B
// 120ms ago".
func describeMirrorLag(l mirror.Lag, bucket string) string {
	s := fmt.Sprintf("lag %d messages, ", l.Messages)
	if l.Heard < 0 {
		s += "never heard from bucket " + bucket
	} else {
		s += fmt.Sprintf("last heard from bucket %s %v ago", bucket, l.Heard.Round(time.Millisecond))
	}
	if l.Error != "" {
		s += "; mirroring fails: " + l.Error
	}
	return s
}

// mirrorJSON is the mirror a JSON output reads, with its lag.
type mirrorJSON struct {
	Mirror        string   `json:"mirror"`
	Bucket        string   `json:"bucket"`
	Authoritative bool     `json:"authoritative"` // always false: a mirror may be stale
	Note          string   `json:"note"`
	Lag           uint64   `json:"lag_messages"`
	HeardSeconds  *float64 `json:"heard_seconds_ago,omitempty"` // absent if the mirror never heard from the origin
	Error         string   `json:"mirror_error,omitempty"`
}

func mirrorJSONOf(m *mirror.Mirror, l mirror.Lag) mirrorJSON {
	j := mirrorJSON{Mirror: m.Name(), Bucket: m.Bucket(), Note: notAuthoritative(m), Lag: l.Messages, Error: l.Error}
	if l.Heard >= 0 {
		heard := seconds(l.Heard)
		j.HeardSeconds = &heard
	}
	return j
}
