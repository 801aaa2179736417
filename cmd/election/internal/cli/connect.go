package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sirupsen/logrus"
	"github.com/synadia-io/orbit.go/natscontext"
)

// defaultServer is where the nats CLI connects with no server and no
// context given.
const defaultServer = nats.DefaultURL

// connFlags are the connection settings every subcommand takes, with the
// nats CLI's flag names, environment variables and precedence: a flag
// overrides its environment variable, and either overrides the same setting
// of the nats context (--context, NATS_CONTEXT, or else the selected one).
type connFlags struct {
	server, context        string
	user, password, token  string
	creds, nkey            string
	tlsCert, tlsKey, tlsCA string
	tlsFirst               bool
	jsDomain, inboxPrefix  string

	// role is the role of election permissions whose permissions the
	// command needs, named when the server denies one; serve, the subject
	// of its leader-only endpoint (--serve), is named with it.
	role, serve string
	// onDenied, when set, is called with each permission the server
	// denies the connection, as a *deniedError.
	onDenied func(error)
	// historyDenials, when set, takes the denials of the leadership
	// history's subjects before onDenied (quietHistory).
	historyDenials *historyDenials
}

// connEnv names the environment variable of each connection setting that
// has one, as the nats CLI reads them.
func (c *connFlags) connEnv() map[string]*string {
	return map[string]*string{
		"NATS_URL":      &c.server,
		"NATS_CONTEXT":  &c.context,
		"NATS_USER":     &c.user,
		"NATS_PASSWORD": &c.password,
		"NATS_TOKEN":    &c.token,
		"NATS_CREDS":    &c.creds,
		"NATS_NKEY":     &c.nkey,
		"NATS_CERT":     &c.tlsCert,
		"NATS_KEY":      &c.tlsKey,
		"NATS_CA":       &c.tlsCA,
	}
}

// add defines the connection flags. Their defaults are empty, so that --help
// never prints a secret taken from the environment: the environment is read
// by fromEnv, after parsing.
func (c *connFlags) add(fs *flagSet) {
	fs.StringVar(&c.server, "server", "",
		"NATS server `URLs`, comma separated; env NATS_URL; default the context's servers, or "+defaultServer)
	fs.alias("s", "server")
	fs.StringVar(&c.context, "context", "",
		"nats CLI context `NAME` or file, for servers and credentials; env NATS_CONTEXT; default the selected context")
	fs.StringVar(&c.user, "user", "", "`USER` name, or a token when no --password is given; env NATS_USER")
	fs.StringVar(&c.password, "password", "", "`PASSWORD` of --user; env NATS_PASSWORD")
	fs.StringVar(&c.token, "token", "", "authentication `TOKEN`; env NATS_TOKEN")
	fs.StringVar(&c.creds, "creds", "", "user credentials `FILE` (JWT and nkey seed); env NATS_CREDS")
	fs.StringVar(&c.nkey, "nkey", "", "user nkey seed `FILE`; env NATS_NKEY")
	fs.StringVar(&c.tlsCert, "tlscert", "", "TLS client certificate `FILE`; env NATS_CERT")
	fs.StringVar(&c.tlsKey, "tlskey", "", "TLS client private key `FILE`; env NATS_KEY")
	fs.StringVar(&c.tlsCA, "tlsca", "", "TLS certificate authority chain `FILE`; env NATS_CA")
	fs.BoolVar(&c.tlsFirst, "tlsfirst", false, "perform the TLS handshake before the server's greeting")
	fs.StringVar(&c.jsDomain, "js-domain", "", "JetStream `DOMAIN` to use, such as a hub's from a leaf node")
	fs.StringVar(&c.inboxPrefix, "inbox-prefix", "", "subject `PREFIX` of reply inboxes (default _INBOX)")
}

// fromEnv fills each setting not given as a flag from its environment
// variable.
func (c *connFlags) fromEnv() {
	for name, setting := range c.connEnv() {
		if *setting == "" {
			*setting = os.Getenv(name)
		}
	}
}

// check says what is wrong with the settings, as bad input, before anything
// connects. It reads the environment first.
func (c *connFlags) check() error {
	c.fromEnv()
	if c.server != "" {
		if err := checkServers(c.server); err != nil {
			return err
		}
	}
	var ways []string
	if c.user != "" {
		ways = append(ways, "--user")
	}
	if c.token != "" {
		ways = append(ways, "--token")
	}
	if c.creds != "" {
		ways = append(ways, "--creds")
	}
	if c.nkey != "" {
		ways = append(ways, "--nkey")
	}
	switch {
	case len(ways) > 1:
		return usageErr{fmt.Errorf("%s given together: want one way to authenticate (flags or their NATS_* variables)", strings.Join(ways, " and "))}
	case c.password != "" && c.user == "":
		return usageErr{errors.New("--password without --user: give the user name too")}
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return usageErr{errors.New("--tlscert and --tlskey go together: give both or neither")}
	}
	for flagName, file := range map[string]string{"--creds": c.creds, "--nkey": c.nkey, "--tlscert": c.tlsCert, "--tlskey": c.tlsKey, "--tlsca": c.tlsCA} {
		if file == "" {
			continue
		}
		if _, err := os.Stat(file); err != nil {
			return usageErr{fmt.Errorf("%s %q: cannot read the file: %v", flagName, file, errors.Unwrap(err))}
		}
	}
	return c.checkSubjects()
}

// checkSubjects says what is wrong with the inbox prefix and the JetStream
// domain, which become parts of subjects.
func (c *connFlags) checkSubjects() error {
	if c.inboxPrefix != "" && !validInboxPrefix(c.inboxPrefix) {
		return usageErr{fmt.Errorf("--inbox-prefix %q: want a subject without wildcards or empty tokens, such as _INBOX.app", c.inboxPrefix)}
	}
	if c.jsDomain != "" && strings.ContainsAny(c.jsDomain, ".*> \t") {
		return usageErr{fmt.Errorf("--js-domain %q: want one subject token, without dots, wildcards or spaces", c.jsDomain)}
	}
	return nil
}

// validInboxPrefix says whether prefix is a subject nats.go accepts as an
// inbox prefix: dot-separated non-empty tokens without wildcards or spaces.
func validInboxPrefix(prefix string) bool {
	for _, token := range strings.Split(prefix, ".") {
		if token == "" || strings.ContainsAny(token, "*> \t\r\n") {
			return false
		}
	}
	return true
}

// options are the nats.go options for the settings given as flags or
// environment variables, applied after the context's so that they win.
func (c *connFlags) options() ([]nats.Option, error) {
	var opts []nats.Option
	if c.server != "" {
		servers := strings.Split(c.server, ",")
		opts = append(opts, func(o *nats.Options) error {
			o.Servers = servers
			return nil
		})
	}
	if c.user != "" || c.token != "" || c.creds != "" || c.nkey != "" {
		// The given credentials replace the context's, whichever kind
		// those are.
		opts = append(opts, func(o *nats.Options) error {
			o.User, o.Password, o.Token, o.TokenHandler = "", "", "", nil
			o.Nkey, o.UserJWT, o.SignatureCB = "", nil, nil
			return nil
		})
	}
	switch {
	case c.user != "" && c.password == "":
		opts = append(opts, nats.Token(c.user)) // as the nats CLI reads a lone --user
	case c.user != "":
		opts = append(opts, nats.UserInfo(c.user, c.password))
	case c.token != "":
		opts = append(opts, nats.Token(c.token))
	case c.creds != "":
		opts = append(opts, nats.UserCredentials(c.creds))
	case c.nkey != "":
		nkey, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return nil, usageErr{fmt.Errorf("--nkey %q: not an nkey seed file", c.nkey)}
		}
		opts = append(opts, nkey)
	}
	if c.tlsCert != "" {
		opts = append(opts, nats.ClientCert(c.tlsCert, c.tlsKey))
	}
	if c.tlsCA != "" {
		opts = append(opts, nats.RootCAs(c.tlsCA))
	}
	if c.tlsFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	if c.inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.inboxPrefix))
	}
	return opts, nil
}

// connect connects as clientName and returns the connection with its
// JetStream context, in the JetStream domain of --js-domain or else of the
// context.
func (c *connFlags) connect(clientName string, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	if err := c.check(); err != nil {
		return nil, nil, err
	}
	given, err := c.options()
	if err != nil {
		return nil, nil, err
	}
	opts := append([]nats.Option{nats.Name(clientName), nats.MaxReconnects(-1), nats.ErrorHandler(c.asyncError)}, given...)
	opts = append(opts, extra...)
	nc, settings, err := natscontext.Connect(c.contextArg(), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", c.describe(), err)
	}
	domain := settings.JSDomain
	if c.jsDomain != "" {
		domain = c.jsDomain
	}
	var js jetstream.JetStream
	if domain != "" {
		js, err = jetstream.NewWithDomain(nc, domain)
	} else {
		js, err = jetstream.New(nc)
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// watchDenials returns ctx, cancelled with the first permission the server
// denies the connection as its cause (see deniedOr), naming role as the one
// that grants it. Call it before connect.
func (c *connFlags) watchDenials(ctx context.Context, role string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	c.role, c.onDenied = role, cancel
	return ctx, func() { cancel(nil) }
}

// asyncError receives the errors the server reports apart from any call,
// instead of nats.go's default handler, which prints them raw on stderr: a
// denied permission goes to onDenied, and the rest show in the calls that
// fail because of them.
func (c *connFlags) asyncError(_ *nats.Conn, _ *nats.Subscription, err error) {
	denied := asDenied(err, c.role)
	if denied == nil || c.historyDenials.take(denied) {
		return
	}
	denied.serve = c.serve
	if c.onDenied != nil {
		c.onDenied(denied)
	}
}

// contextArg is --context as natscontext takes it: a context's name, or the
// absolute path of a context file; a relative path (with a slash or ending
// in .json), as the nats CLI takes it, is made absolute.
func (c *connFlags) contextArg() string {
	if strings.HasSuffix(c.context, ".json") || strings.ContainsRune(c.context, filepath.Separator) {
		if abs, err := filepath.Abs(c.context); err == nil {
			return abs
		}
	}
	return c.context
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

// ConnEnv returns the names of the environment variables the commands read
// connection settings from, as the nats CLI does.
func ConnEnv() []string {
	return slices.Collect(maps.Keys((&connFlags{}).connEnv()))
}
