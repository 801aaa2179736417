package natscause

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestExplainNamesTheTopologyFault builds the errors as nats.go returns
// them, wrapped as callers wrap them.
func TestExplainNamesTheTopologyFault(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"10008", fmt.Errorf("watching: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), NoMetaQuorum},
		{"another API error", &jetstream.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"}, ""},
		{"no stream response", fmt.Errorf("put: %w", jetstream.ErrNoStreamResponse), StreamUnreachable},
		{"deadline", fmt.Errorf("update: %w", context.DeadlineExceeded), NoReply},
		{"nats timeout", nats.ErrTimeout, NoReply},
		{"cancelled", context.Canceled, ""},
		{"other", errors.New("boom"), ""},
		{"nil", nil, ""},
	}
	for _, tt := range tests {
		if got := Explain(tt.err); got != tt.want {
			t.Errorf("%s: Explain(%v) = %q, want %q", tt.name, tt.err, got, tt.want)
		}
	}
}
