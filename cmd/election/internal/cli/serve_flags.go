package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvelect/election/endpoint"
	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"
)

// serveFlags are the flags of a leader-only endpoint, on run and sidecar:
// the subject served while this process leads, and the HTTP application
// its requests are forwarded to.
type serveFlags struct {
	serve       string // the subject, or "": no endpoint
	forward     string // the application's URL
	serviceName string // the micro service's name; "": made of the key
}

// add defines the flags.
func (s *serveFlags) add(fs *flagSet) {
	fs.StringVar(&s.serve, "serve", "", "serve `SUBJECT` as a NATS micro service while this process leads, forwarding each request to --forward")
	fs.StringVar(&s.forward, "forward", "", "with --serve, the `URL` (http or https) each request is POSTed to; the response is the reply")
	fs.StringVar(&s.serviceName, "service-name", "", "with --serve, the micro service's `NAME` (letters, digits, - and _; default: the key, each other character replaced by _)")
}

// check validates the flags for the election key key, and defaults the
// service name.
func (s *serveFlags) check(key string) error {
	switch {
	case s.serve == "" && s.forward != "":
		return errors.New("--forward is for --serve: give the SUBJECT whose requests go to the URL")
	case s.serve == "" && s.serviceName != "":
		return errors.New("--service-name is for --serve")
	case s.serve == "":
		return nil
	case s.forward == "":
		return errors.New("--serve needs --forward: the http or https URL its requests are forwarded to")
	}
	if err := endpoint.CheckSubject(s.serve); err != nil {
		return fmt.Errorf("--serve: %w", err)
	}
	if err := endpoint.CheckURL(s.forward); err != nil {
		return fmt.Errorf("--forward: %w", err)
	}
	if s.serviceName == "" {
		s.serviceName = endpoint.ServiceName(key)
	}
	if err := endpoint.CheckServiceName(s.serviceName); err != nil {
		return fmt.Errorf("--service-name: %w", err)
	}
	return nil
}

// endpoint returns the endpoint the flags ask for, on nc, logging to log;
// nil without --serve.
func (s *serveFlags) endpoint(nc *nats.Conn, log *logrus.Entry) (*endpoint.Endpoint, error) {
	if s.serve == "" {
		return nil, nil
	}
	forward, err := endpoint.Forward(s.forward, nil)
	if err != nil {
		return nil, fmt.Errorf("--forward: %w", err)
	}
	return endpoint.New(nc, endpoint.Config{
		Subject: s.serve, Handler: forward, Name: s.serviceName,
		Description: "leader-only endpoint of kvelect's election",
		Logger:      slogOf(log),
	})
}

// serveWhileLeading serves ep while leading lasts, and returns once it has
// stopped; a failure is logged, and leaves the leadership as it is.
func serveWhileLeading(ep *endpoint.Endpoint, leading context.Context, log *logrus.Entry) {
	if err := ep.Serve(leading); err != nil {
		log.WithError(err).Warn("the leader-only endpoint")
		<-leading.Done()
	}
}
