package history

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestFailureHintsWhatTheErrorCanMean: the first failure's warning says
// what a permission to publish would need only for a call that got no
// answer (a denied publish gets none), and what the error means about the
// link otherwise, never blaming a permission for a stream that did not
// answer.
func TestFailureHintsWhatTheErrorCanMean(t *testing.T) {
	for _, tt := range []struct {
		name       string
		err        error
		permission bool
		cause      string
	}{
		{"timeout", fmt.Errorf("publish: %w", context.DeadlineExceeded), true, "no reply in time"},
		{"no stream response", fmt.Errorf("publish: %w", jetstream.ErrNoStreamResponse), false, "no server of the bucket's stream answered"},
		{"behind", nil, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			h := &History{bucket: "B", log: slog.New(slog.NewTextHandler(&out, nil))}
			h.failure("could not record", tt.err)
			got := out.String()
			if strings.Contains(got, "permission") != tt.permission {
				t.Errorf("permission hint %v, want %v: %s", !tt.permission, tt.permission, got)
			}
			if !strings.Contains(got, tt.cause) {
				t.Errorf("no cause %q: %s", tt.cause, got)
			}
		})
	}
}
