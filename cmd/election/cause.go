package main

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

func (e *domainError) Error() string { return e.err.Error() }
func (e *domainError) Unwrap() error { return e.err }

// inDomain returns err, marked with the JetStream domain js sends its
// requests to when it has one, so that cause can name the domain.
func inDomain(js jetstream.JetStream, err error) error {
	if err == nil || js == nil {
		return err
	}
	var already *domainError
	if errors.As(err, &already) {
		return err
	}
	if domain := js.Options().Domain; domain != "" {
		return &domainError{domain: domain, err: err}
	}
	return err
}

// withDomain returns err marked with from's JetStream domain, as inDomain.
func withDomain(from site, err error) error {
	if err == nil || from.domain == "" || errors.As(err, new(*domainError)) {
		return err
	}
	return &domainError{domain: from.domain, err: err}
}

// keyOpError is an error of a read or write of the bucket's keys: those are
// answered only by the servers that hold the bucket's stream, whereas the
// JetStream API is answered by any JetStream server of the domain. So "no
// responders" here means that the bucket's cluster is out of reach.
type keyOpError struct{ err error }

func (e *keyOpError) Error() string { return e.err.Error() }
func (e *keyOpError) Unwrap() error { return e.err }

// onKeys marks err as the error of a read or write of the bucket's keys.
func onKeys(err error) error {
	if err == nil {
		return nil
	}
	return &keyOpError{err}
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
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders) && errors.As(err, new(*keyOpError)):
		if domain != "" {
			return fmt.Sprintf("no server of the bucket's stream answered: the bucket's cluster or JetStream domain %q "+
				"is unreachable from this server, over a cut gateway or leaf node link", domain)
		}
		return natscause.StreamUnreachable
	case domain != "" && (errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled)):
		return fmt.Sprintf("JetStream domain %q cannot be reached from this server: no server of that domain answered; "+
			"check --js-domain, and the leaf node link to that domain", domain)
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return "no JetStream answered: enable JetStream for this account, or, through a leaf node, give the hub's --js-domain"
	}
	return natscause.Explain(err)
}
