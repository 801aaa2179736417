package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
	"github.com/synadia-io/orbit.go/natscontext"
)

// defaultServer is where the nats CLI connects with no server and no
// context given.
const defaultServer = nats.DefaultURL

// connFlags are the connection flags every subcommand takes, with the nats
// CLI's names, environment variables and precedence: a context supplies the
// servers and credentials, and --server (or NATS_URL) overrides its servers.
type connFlags struct {
	server  string
	context string
}

func (c *connFlags) add(fs *flagSet) {
	fs.StringVar(&c.server, "server", os.Getenv("NATS_URL"),
		"NATS server `URLs`, comma separated; env NATS_URL; default the context's servers, or "+defaultServer)
	fs.alias("s", "server")
	fs.StringVar(&c.context, "context", os.Getenv("NATS_CONTEXT"),
		"nats CLI context `NAME` or file, for servers and credentials; env NATS_CONTEXT; default the selected context")
}

// connect connects as clientName and returns the connection with its
// JetStream context, in the context's JetStream domain if it has one.
func (c *connFlags) connect(clientName string, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	if c.server != "" {
		if err := checkServers(c.server); err != nil {
			return nil, nil, err
		}
	}
	opts := append([]nats.Option{nats.Name(clientName), nats.MaxReconnects(-1)}, extra...)
	if c.server != "" {
		servers := strings.Split(c.server, ",")
		opts = append(opts, func(o *nats.Options) error {
			o.Servers = servers
			return nil
		})
	}
	nc, settings, err := natscontext.Connect(c.context, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", c.describe(), err)
	}
	var js jetstream.JetStream
	if settings.JSDomain != "" {
		js, err = jetstream.NewWithDomain(nc, settings.JSDomain)
	} else {
		js, err = jetstream.New(nc)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// describe says where connect goes, for errors.
func (c *connFlags) describe() string {
	switch {
	case c.server != "":
		return redactURLs(c.server)
	case c.context != "":
		return fmt.Sprintf("the servers of nats context %q", c.context)
	default:
		return defaultServer + " (or the selected nats context's servers)"
	}
}

// logConnection returns the options that log, once each time, that the
// connection to the server was lost and that it is back, naming the server
// with its credentials redacted.
func logConnection(log *logrus.Entry) []nats.Option {
	return []nats.Option{
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // closed on purpose, at the end
			}
			entry := log
			if err != nil {
				entry = entry.WithError(err)
			}
			entry.Warn("lost the connection to the NATS server; reconnecting")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.WithField("server", redactURLs(nc.ConnectedUrlRedacted())).Info("reconnected to the NATS server")
		}),
	}
}
