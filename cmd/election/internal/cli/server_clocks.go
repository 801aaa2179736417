package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/natscontext"
)

// serverTime returns a reading of the bucket's servers' wall clock: the
// time the server put on its answer to a status request, moved on since by
// this host's monotonic clock. A key's write times are stamped by the
// servers' clock, so an age computed against this reading carries no offset
// between this host's clock and theirs (only the bound between the
// servers'). Without a time in the answer, this host's clock.
func serverTime(ctx context.Context, kv jetstream.KeyValue) func() time.Time {
	status, err := kv.Status(ctx)
	asked := time.Now()
	if bs, ok := status.(*jetstream.KeyValueBucketStatus); err == nil && ok && bs.StreamInfo() != nil && !bs.StreamInfo().TimeStamp.IsZero() {
		at := bs.StreamInfo().TimeStamp
		return func() time.Time { return at.Add(time.Since(asked)) }
	}
	return time.Now
}

// The servers' clocks, read as each server tells its own time in answer to
// a ping of every server ($SYS.REQ.SERVER.PING.<endpoint>). Every account
// may ask for its own connections' CONNZ that way (the server imports that
// service into each account); where a user's permissions forbid it, a user
// of the system account may ask for each server's VARZ. Both answers carry
// the server's time ("now"), set as it answers.

// clockPings is how many times the servers are pinged; each server's
// reading with the shortest round trip is kept.
const clockPings = 5

// clockPingWait bounds how long one ping waits for the servers' answers
// when not every server expected has answered.
const clockPingWait = time.Second

// clockQuiet ends a ping that expects no particular server once no new
// server has answered for this long.
const clockQuiet = 200 * time.Millisecond

// serverClock is one server's wall clock as read by a ping.
type serverClock struct {
	Name    string
	Cluster string
	// Offset is the server's clock less this host's, taken at the middle
	// of the ping's round trip; Error bounds how far off that can be: half
	// the round trip.
	Offset, Error time.Duration
}

// serverClocks is what the servers told of their clocks.
type serverClocks struct {
	Servers []serverClock // by name
	// Via says how they were read: which subject, as which account.
	Via string
	// Unread says why they were not read, and how to read them; "" when
	// they were.
	Unread string
}

// systemFlags name a user of the system account, for what only the system
// account may ask the servers: --system-context and --system-creds.
type systemFlags struct {
	context, creds string
}

// add defines --system-context and --system-creds.
func (s *systemFlags) add(fs *flagSet) {
	fs.StringVar(&s.context, "system-context", "",
		"nats CLI context `NAME` or file of a system-account user, to read the servers' clocks when this user may not")
	fs.StringVar(&s.creds, "system-creds", "",
		"credentials `FILE` of a system-account user (servers as for the bucket), to read the servers' clocks when this user may not")
}

// check says what is wrong with the flags.
func (s *systemFlags) check() error {
	if s.context != "" && s.creds != "" {
		return usageErr{errors.New("--system-context and --system-creds given together: want one way to reach the system account")}
	}
	if s.creds != "" {
		if _, err := os.Stat(s.creds); err != nil {
			return usageErr{fmt.Errorf("--system-creds %q: cannot read the file: %v", s.creds, errors.Unwrap(err))}
		}
	}
	return nil
}

// given reports whether a system-account user was named.
func (s *systemFlags) given() bool { return s.context != "" || s.creds != "" }

// describe names the system-account user given, for the output.
func (s *systemFlags) describe() string {
	if s.context != "" {
		return "--system-context " + s.context
	}
	return "--system-creds " + s.creds
}

// readServerClocks reads the clocks of the servers, waiting in each ping for
// the servers named in want (the bucket's replicas; none: whichever answer).
// It asks as the user of conn first, on a connection of its own so that a
// denied ping ends nothing else, then as the system-account user of sys if
// one was given.
func readServerClocks(ctx context.Context, conn *connFlags, sys systemFlags, want []string) serverClocks {
	const connzSubject = "$SYS.REQ.SERVER.PING.CONNZ"
	own := *conn
	var denied atomic.Pointer[deniedError]
	own.role, own.historyDenials = "", nil
	own.onDenied = func(err error) {
		var d *deniedError
		if errors.As(err, &d) {
			denied.Store(d)
		}
	}
	why := ""
	nc, _, err := own.connect("election clocks")
	if err == nil {
		clocks, pingErr := pingClocks(ctx, nc, connzSubject, []byte(`{"limit":1}`), want)
		nc.Close()
		if pingErr == nil {
			clocks.Via = "this user's account, " + connzSubject
			return clocks
		}
		why = pingErr.Error()
		if d := denied.Load(); d != nil {
			why = "permission denied: publish to " + strconv.Quote(d.subject)
		}
	} else {
		why = err.Error()
	}
	how := fmt.Sprintf("this user's account could not ping the servers (%s: %s)", connzSubject, why)
	if !sys.given() {
		return serverClocks{Unread: how + "; give a system-account user with --system-context NAME or --system-creds FILE, " +
			"or allow this user to publish to " + connzSubject}
	}

	const varzSubject = "$SYS.REQ.SERVER.PING.VARZ"
	sysConn := connFlags{
		server: conn.server, context: conn.context, creds: sys.creds,
		tlsCert: conn.tlsCert, tlsKey: conn.tlsKey, tlsCA: conn.tlsCA, tlsFirst: conn.tlsFirst, inboxPrefix: conn.inboxPrefix,
	}
	if sys.context != "" {
		sysConn = connFlags{context: sys.context}
	}
	opts, err := sysConn.options() // not connect: the environment's NATS_* settings are the bucket user's
	if err == nil {
		opts = append([]nats.Option{nats.Name("election clocks (system account)"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}, opts...)
		var sysNC *nats.Conn
		if sysNC, _, err = natscontext.Connect(sysConn.contextArg(), opts...); err == nil {
			var clocks serverClocks
			clocks, err = pingClocks(ctx, sysNC, varzSubject, nil, want)
			sysNC.Close()
			if err == nil {
				clocks.Via = "the system account (" + sys.describe() + "), " + varzSubject
				return clocks
			}
		}
	}
	return serverClocks{Unread: fmt.Sprintf("%s, nor the system-account user of %s (%s: %v)", how, sys.describe(), varzSubject, err)}
}

// clockAnswer is the part of a server's answer to a ping that tells its
// time.
type clockAnswer struct {
	Server struct {
		Name    string    `json:"name"`
		Cluster string    `json:"cluster"`
		Time    time.Time `json:"time"`
	} `json:"server"`
	Data struct {
		Now time.Time `json:"now"`
	} `json:"data"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// pingClocks pings every server on subject clockPings times and keeps each
// server's reading with the shortest round trip. It fails if no server
// answered.
func pingClocks(ctx context.Context, nc *nats.Conn, subject string, body []byte, want []string) (serverClocks, error) {
	best := map[string]serverClock{}
	for range clockPings {
		if err := pingOnce(ctx, nc, subject, body, want, best); err != nil {
			return serverClocks{}, err
		}
	}
	clocks := serverClocks{}
	for _, name := range slices.Sorted(maps.Keys(best)) {
		clocks.Servers = append(clocks.Servers, best[name])
	}
	return clocks, nil
}

// pingOnce pings the servers once, keeping in best each server's reading
// if its round trip is the shortest yet. It waits until every server of
// want has answered, or clockPingWait has passed, or (want empty) no new
// server has answered for clockQuiet.
func pingOnce(ctx context.Context, nc *nats.Conn, subject string, body []byte, want []string, best map[string]serverClock) error {
	inbox := nc.NewRespInbox()
	answers := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	sent := time.Now()
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		return err
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return err
	}
	wait := time.NewTimer(clockPingWait)
	defer wait.Stop()
	quiet := time.NewTimer(clockPingWait)
	defer quiet.Stop()
	heard := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wait.C:
			if len(heard) == 0 {
				return fmt.Errorf("no server answered within %v", clockPingWait)
			}
			return nil
		case <-quiet.C:
			if len(heard) > 0 {
				return nil
			}
		case msg := <-answers:
			elapsed := time.Since(sent)
			if msg.Header.Get("Status") == "503" {
				return errors.New("no server answers on it (no responders)")
			}
			var a clockAnswer
			if err := json.Unmarshal(msg.Data, &a); err != nil || a.Server.Name == "" {
				continue
			}
			if a.Error != nil {
				return fmt.Errorf("server %s: %s", a.Server.Name, a.Error.Description)
			}
			now := a.Data.Now
			if now.IsZero() {
				now = a.Server.Time
			}
			if now.IsZero() {
				continue
			}
			reading := serverClock{Name: a.Server.Name, Cluster: a.Server.Cluster,
				Offset: now.Sub(sent.Add(elapsed / 2)), Error: elapsed / 2}
			if b, ok := best[reading.Name]; !ok || reading.Error < b.Error {
				best[reading.Name] = reading
			}
			heard[reading.Name] = true
			if len(want) > 0 && !slices.ContainsFunc(want, func(name string) bool { return !heard[name] }) {
				return nil
			}
			if len(want) == 0 {
				quiet.Reset(clockQuiet)
			}
		}
	}
}

// spread is the largest difference between the clocks of the servers of
// names (all of them: nil), with the bound on its error, and the two
// servers apart by it (ahead first).
func (c serverClocks) spread(names []string) (d, err time.Duration, ahead, behind string) {
	var of []serverClock
	for _, s := range c.Servers {
		if names == nil || slices.Contains(names, s.Name) {
			of = append(of, s)
		}
	}
	for _, a := range of {
		for _, b := range of {
			if diff := a.Offset - b.Offset; ahead == "" || diff > d {
				d, err, ahead, behind = diff, a.Error+b.Error, a.Name, b.Name
			}
		}
	}
	return d, err, ahead, behind
}

// streamServers returns the stream leader of info and the names of every
// server that holds a replica: none on a server in no cluster, which
// reports none.
func streamServers(info *jetstream.StreamInfo) (leader string, servers []string) {
	if info == nil || info.Cluster == nil {
		return "", nil
	}
	leader = info.Cluster.Leader
	if leader != "" {
		servers = append(servers, leader)
	}
	for _, r := range info.Cluster.Replicas {
		servers = append(servers, r.Name)
	}
	return leader, servers
}

// formatOffset writes an offset with its sign, in milliseconds to the
// microsecond.
func formatOffset(d time.Duration) string {
	return fmt.Sprintf("%+.3fms", float64(d)/float64(time.Millisecond))
}

// formatMS writes a duration in milliseconds to the microsecond.
func formatMS(d time.Duration) string {
	return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
}

// clockLines says what the servers told of their clocks, for bucket
// check: each server's offset from this host, and whether the bucket's
// servers (servers; none: every one that answered) agree within the
// election's assumption; or why they could not be read. Each line starts
// "clocks"; a disagreement beyond the assumption is a warning.
func clockLines(c serverClocks, leader string, servers []string) (lines, warnings []string) {
	if c.Unread != "" {
		return []string{"clocks, not read: " + c.Unread}, nil
	}
	var each []string
	for _, s := range c.Servers {
		item := fmt.Sprintf("%s %s ±%s", s.Name, formatOffset(s.Offset), formatMS(s.Error))
		if s.Name == leader {
			item += " (stream leader)"
		}
		each = append(each, item)
	}
	servs := "servers"
	if len(c.Servers) == 1 {
		servs = "server"
	}
	lines = append(lines, fmt.Sprintf("clocks: read from %d %s through %s; each server's clock less this host's: %s",
		len(c.Servers), servs, c.Via, strings.Join(each, ", ")))
	if len(servers) < 2 && len(c.Servers) < 2 {
		return append(lines, "clocks: one server: no offsets between servers to compare"), nil
	}
	d, err, ahead, behind := c.spread(servers)
	if ahead == "" {
		return append(lines, "clocks: none of the bucket's servers answered"), nil
	}
	if d > election.ServerClockOffset {
		return lines, []string{fmt.Sprintf("clocks: %s is %s ±%s ahead of %s, beyond the %v the election assumes between the bucket's servers: "+
			"a key can age out early and two leaders overlap; run NTP or chrony on every server (docs/operations.md, Clocks)",
			ahead, formatMS(d), formatMS(err), behind, election.ServerClockOffset)}
	}
	return append(lines, fmt.Sprintf("clocks: the bucket's servers agree within %s ±%s (%s ahead of %s); the election assumes %v",
		formatMS(d), formatMS(err), ahead, behind, election.ServerClockOffset)), nil
}
