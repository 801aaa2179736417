package cli

import (
	"errors"
	"fmt"

	"github.com/kvelect/election/internal/natscause"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The errors a command meets when a supercluster or a leaf node is cut
// apart are nats.go's generic ones ("no responders", "timeout", "jetstream
// not enabled", an API error code): cause turns each into the topology fault
// it means here, measured on nats-server 2.15.2 (docs/topologies.md). The
// meanings the library's logs share come from internal/natscause.

// jsErrNoSuitablePeers is the server's error code 10005, "no suitable peers
// for placement": no server of the cluster asked for (or of the client's
// cluster) has room for the stream and the placement's tags.
const jsErrNoSuitablePeers jetstream.ErrorCode = 10005

// domainError is an error of a request made in a JetStream domain (the
// --js-domain flag or the nats context's), naming that domain for cause.
type domainError struct {
	domain string
	err    error
}

// Error is the marked error's own text: the domain shows in cause's hint.
func (e *domainError) Error() string { return e.err.Error() }

// Unwrap returns the marked error.
func (e *domainError) Unwrap() error { return e.err }

// inDomain returns err, marked with the JetStream domain js sends its
// requests to when it has one, so that cause can name the domain.
func inDomain(js jetstream.JetStream, err error) error {
	if js == nil {
		return err
	}
	return markDomain(js.Options().Domain, err)
}

// withDomain returns err marked with from's JetStream domain, as inDomain.
func withDomain(from site, err error) error { return markDomain(from.domain, err) }

// markDomain returns err marked with domain, unless either is empty or err
// is marked already.
func markDomain(domain string, err error) error {
	if err == nil || domain == "" || errors.As(err, new(*domainError)) {
		return err
	}
	return &domainError{domain: domain, err: err}
}

// cause says, in words, what err means about the link between this client
// and the bucket or its JetStream, or "" if err is not one of those.
func cause(err error) string {
	var domain string
	if de := (*domainError)(nil); errors.As(err, &de) {
		domain = de.domain
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrNoSuitablePeers:
		return "no server matches the placement: --cluster takes the name in the servers' cluster { name }, " +
			"--tags the tags in their server_tags, and the cluster needs as many such servers as --replicas"
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		if domain != "" {
			return fmt.Sprintf("no server of the bucket's stream answered: the stream in JetStream domain %q has no leader "+
				"right now, or that domain is unreachable from this server (the leaf node link to it)", domain)
		}
		return natscause.StreamUnreachable
	case domain != "" && (errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled)):
		return fmt.Sprintf("JetStream domain %q cannot be reached from this server: no server of that domain answered; "+
			"check --js-domain, and the leaf node link to that domain", domain)
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return "no JetStream answered: enable JetStream for this account, or, if the bucket's JetStream is in another domain, give its --js-domain"
	}
	return natscause.Explain(err)
}
