package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestHintNamesTheTopologyFault builds the errors as nats.go returns them
// (and as the commands wrap them) and checks what hint says of each.
func TestHintNamesTheTopologyFault(t *testing.T) {
	t.Parallel()
	// The server's answer to a stream or consumer create when the
	// JetStream meta group has no leader in reach: nats.go returns the
	// response's *APIError as it is.
	noMeta := &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	meta := "no JetStream meta leader reachable from this server"
	stream := "no server of the bucket's stream answered: the stream has no leader right now"
	timeout := "no reply in time: the server, or the link to the bucket's servers, is slow or silently dead"
	noJS := "no JetStream answered: enable JetStream for this account"
	domain := `JetStream domain "hub" cannot be reached from this server`
	hub := site{domain: "hub"}
	for _, c := range []struct {
		name string
		err  error
		says string
	}{
		{"10008", noMeta, meta},
		{"10008 as election.CreateBucket wraps it",
			fmt.Errorf("%w: the server refused bucket %q: %w", election.ErrBucketConfig, "B", noMeta), meta},
		{"10008 in a domain", withDomain(hub, fmt.Errorf("opening bucket %q: %w", "B", noMeta)), meta},
		// A publish (Create, Update, renewal) that found no responders
		// after nats.go's retries.
		{"no stream response", fmt.Errorf("renewing: %w", jetstream.ErrNoStreamResponse), stream},
		{"no stream response in a domain", withDomain(hub, jetstream.ErrNoStreamResponse),
			`the stream in JetStream domain "hub" has no leader right now, or that domain is unreachable`},
		{"no responders to the JetStream API", fmt.Errorf("opening bucket %q: %w", "B", nats.ErrNoResponders), noJS},
		{"jetstream not enabled", jetstream.ErrJetStreamNotEnabled, noJS},
		{"jetstream not enabled for the account", jetstream.ErrJetStreamNotEnabledForAccount, noJS},
		{"no responders in a domain", withDomain(hub, fmt.Errorf("opening bucket %q: %w", "B", nats.ErrNoResponders)), domain},
		// nats.go's legacy API, under KV watchers, turns no responders
		// into "jetstream not enabled".
		{"jetstream not enabled in a domain", withDomain(hub, fmt.Errorf("watching: %w", jetstream.ErrJetStreamNotEnabled)), domain},
		{"context deadline", fmt.Errorf("opening bucket %q: %w", "B", context.DeadlineExceeded), timeout},
		{"nats timeout", fmt.Errorf("reading: %w", nats.ErrTimeout), timeout},
		{"interrupted", fmt.Errorf("opening bucket %q: %w", "B", context.Canceled), ""},
		{"no suitable peers", fmt.Errorf("%w: the server refused bucket %q: %w", election.ErrBucketConfig, "B",
			&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"}), "no server matches the placement"},
		{"another API error", &jetstream.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"}, ""},
		{"bucket missing", errors.New(`bucket "B" does not exist`), ""},
	} {
		got := hint(c.err)
		switch {
		case c.says == "" && got != "":
			t.Errorf("%s: hint %q, want none", c.name, got)
		case !strings.Contains(got, c.says):
			t.Errorf("%s: hint %q does not say %q", c.name, got, c.says)
		}
		if c.err.Error() == "" || strings.Contains(c.err.Error(), "domainError") {
			t.Errorf("%s: the error's own text changed: %q", c.name, c.err)
		}
	}
}

// TestDomainMarksKeepTheErrorsText: marking an error with its domain
// changes neither its text nor what errors.Is finds.
func TestDomainMarksKeepTheErrorsText(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("opening bucket %q: %w", "B", nats.ErrNoResponders)
	if marked := withDomain(site{domain: "hub"}, err); marked.Error() != err.Error() || !errors.Is(marked, nats.ErrNoResponders) {
		t.Errorf("marked %q (is no responders: %v), want %q", marked, errors.Is(marked, nats.ErrNoResponders), err)
	}
	if withDomain(site{}, err) != err || withDomain(site{domain: "hub"}, nil) != nil {
		t.Error("a mark without a domain, or of no error, should change nothing")
	}
}

// TestUnreachableDomainIsNamed asks a real server for a JetStream domain
// none of its servers has: the commands say that the domain cannot be
// reached from this server, where nats.go says "no responders".
func TestUnreachableDomainIsNamed(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "HERE", TTL: 2 * time.Second})
	want := `JetStream domain "nowhere" cannot be reached from this server`
	for _, args := range [][]string{
		{"bucket", "check", "-s", s.ClientURL(), "--js-domain", "nowhere", "--bucket", "HERE"},
		{"bucket", "create", "-s", s.ClientURL(), "--js-domain", "nowhere", "--bucket", "HERE", "--history", "0"},
		{"status", "-s", s.ClientURL(), "--js-domain", "nowhere", "--bucket", "HERE"},
	} {
		code, stdout, stderr := runCLI(t, args...)
		e2e.WantOneLineError(t, code, ExitError, stdout, stderr, want)
	}
	code, stdout, stderr := runCLI(t, "check", "-s", s.ClientURL(), "--js-domain", "nowhere", "--bucket", "HERE", "--key", "k")
	if code != checkUnknown || !strings.Contains(stdout, want) {
		t.Errorf("election check: exit %d, stdout %q, stderr %q; want %d, saying %q", code, stdout, stderr, checkUnknown, want)
	}
}

// TestHintsPresumeNoGatewayOrLeafNode: without a JetStream domain, which
// only a leaf node setup gives, no hint blames a gateway or a leaf node:
// the client cannot tell one lies on the way.
func TestHintsPresumeNoGatewayOrLeafNode(t *testing.T) {
	for _, err := range []error{
		jetstream.ErrNoStreamResponse, context.DeadlineExceeded, nats.ErrTimeout,
		&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		nats.ErrNoResponders, jetstream.ErrJetStreamNotEnabled, jetstream.ErrJetStreamNotEnabledForAccount,
	} {
		if h := hint(err); strings.Contains(h, "gateway") || strings.Contains(h, "leaf") {
			t.Errorf("hint for %v presumes a gateway or leaf node: %s", err, h)
		}
	}
}
