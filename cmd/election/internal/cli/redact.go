package cli

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// errUsage matches an error caused by bad input (a usageErr): the command
// exits 2.
var errUsage = errors.New("bad input")

// usageErr is an error caused by bad input; its message is err's.
type usageErr struct{ error }

func (usageErr) Is(target error) bool { return target == errUsage }

// redactURLs returns servers, a comma-separated list of server URLs, with
// every user name, password and token replaced by "REDACTED", so that it can
// be printed.
func redactURLs(servers string) string {
	parts := strings.Split(servers, ",")
	for i, s := range parts {
		parts[i] = redactURL(strings.TrimSpace(s))
	}
	return strings.Join(parts, ",")
}

func redactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = "REDACTED@" + rest[at+1:]
	}
	if scheme == "" {
		return rest
	}
	return scheme + "://" + rest
}

// checkServers says what is wrong with servers, a comma-separated list of
// server URLs (nats://, tls://, ws:// or wss://, or HOST:PORT), naming them
// redacted.
func checkServers(servers string) error {
	for _, s := range strings.Split(servers, ",") {
		s = strings.TrimSpace(s)
		target := s
		if !strings.Contains(s, "://") {
			target = "nats://" + s
		}
		u, err := url.Parse(target)
		switch {
		case err != nil || u.Host == "" || u.Hostname() == "" || !validHostPort(u.Host):
			return usageErr{fmt.Errorf("server %q is not a URL: want nats://HOST:PORT (or tls://, ws://, wss://), comma separated", redactURL(s))}
		case u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss":
			return usageErr{fmt.Errorf("server %q: scheme %q: want nats, tls, ws or wss", redactURL(s), u.Scheme)}
		}
	}
	return nil
}

// validHostPort reports whether hostport is a host, or a host and a port
// number (an IPv6 address in brackets).
func validHostPort(hostport string) bool {
	if !strings.Contains(hostport, ":") {
		return true
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 65536
}
