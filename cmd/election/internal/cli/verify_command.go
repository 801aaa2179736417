package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const verifyAbout = `Usage:
  election verify [--bucket B] [--samples 20] [--duration 5s] [--write] [--step-down]
                  [--system-context NAME | --system-creds FILE] [--json]

Measures, against your own servers and the bucket B, what an election's
guarantees rest on, and prints it with what follows for the bucket's TTL:

  round trips     to the stream leader (stream info requests, --samples of
                  them spread over --duration) and to the connected server
                  (PING): median and p99; with --write, of revision-checked
                  updates of a probe key, the path of a renewal
  expiry lag      with --write: how long after its TTL the probe key is gone
                  (it is written last, then left to age out: a TTL more)
  server clocks   each server's clock less this host's, read by pinging
                  every server as this user ($SYS.REQ.SERVER.PING.CONNZ) or
                  as the system-account user of --system-context or
                  --system-creds ($SYS.REQ.SERVER.PING.VARZ); and how far
                  apart the bucket's servers are, against the 100ms the
                  election assumes. Said so, and how to read them, when
                  neither can
  clock rate      this host's monotonic clock against the stream leader's
                  wall clock (the time on its stream info answers), in parts
                  per million, against the 5% the election assumes
  the stream      its replicas, leader and each follower's state
  TTLs            the smallest safe TTL here: four renewals at the p99 round
                  trip fit in the leader's retry window, and its work
                  deadline comes before the earliest expiry the measured
                  server clocks allow; whether the bucket's TTL rides out a
                  stream-leader election of a replicated bucket (raft elects
                  one 4-9s after the stream leader's server crashes, and
                  renewals fail meanwhile); and a recommended TTL

Read-only unless told: --write writes a probe key (_kvelect.verify.N, which
elections and status ignore) and waits it out; --step-down asks the stream
leader to step down, disrupting renewals for as long as it times (about a
second), and needs the admin role's permissions. On a single server it says
what it cannot measure (offsets between servers, stream-leader elections).

--json prints one object with every figure.

Exit status, as election check: 0 OK, 1 WARNING (a TTL below what is
measured to be safe or to ride out a stream-leader election, a clock past
half of what the election assumes, a replica behind), 2 CRITICAL (clocks
beyond what the election assumes, a key expired early, an unusable
bucket), 3 UNKNOWN (the server unreachable, the bucket missing, a
permission denied, and bad flags).
`

// Limits of verify's flags.
const (
	minVerifySamples = 5
	maxVerifySamples = 1000
	maxVerifyTime    = 10 * time.Minute
)

// maxStreamLeaderElection is the longest raft takes to elect a new leader
// of a replicated stream after its leader's server crashes, with
// nats-server's default timers: 4-9 s (docs/topologies.md). Renewals fail
// meanwhile.
const (
	minStreamLeaderElection = 4 * time.Second
	maxStreamLeaderElection = 9 * time.Second
)

// renewalsInWindow is how many renewal round trips the smallest safe TTL
// fits in a leader's retry window (docs/topologies.md, "The TTL for a given
// round trip").
const renewalsInWindow = 4

// verifyConfig is what verify's flags say.
type verifyConfig struct {
	bucket          string
	samples         int
	duration        time.Duration
	write, stepDown bool
	asJSON          bool
	sys             systemFlags
}

// ms is a duration in milliseconds, as the JSON carries durations.
type ms float64

func msOf(d time.Duration) ms { return ms(float64(d) / float64(time.Millisecond)) }

// duration is m as a time.Duration.
func (m ms) duration() time.Duration { return time.Duration(float64(m) * float64(time.Millisecond)) }

// roundTrips are the round trips of one kind of request.
type roundTrips struct {
	What    string `json:"what"`
	Samples int    `json:"samples"`
	Failed  int    `json:"failed,omitempty"`
	Median  ms     `json:"median_ms"`
	P99     ms     `json:"p99_ms"`
	Error   string `json:"error,omitempty"` // the last failure
}

// replicaState is one replica of the bucket's stream.
type replicaState struct {
	Name    string `json:"name"`
	Leader  bool   `json:"leader,omitempty"`
	Current bool   `json:"current"`
	Offline bool   `json:"offline,omitempty"`
	Active  ms     `json:"active_ms,omitempty"`
	Lag     uint64 `json:"lag,omitempty"`
}

// clockJSON is one server's clock less this host's.
type clockJSON struct {
	Name         string `json:"name"`
	Offset       ms     `json:"offset_ms"`
	Error        ms     `json:"error_ms"`
	StreamLeader bool   `json:"stream_leader,omitempty"`
	Replica      bool   `json:"replica,omitempty"` // holds a replica of the bucket
}

// clocksJSON is what verify read of the servers' clocks.
type clocksJSON struct {
	Via     string      `json:"via,omitempty"`
	Servers []clockJSON `json:"servers,omitempty"`
	// Spread is the largest difference between the clocks of the bucket's
	// servers, with its error bound; absent with one server.
	Spread      *ms    `json:"spread_ms,omitempty"`
	SpreadError *ms    `json:"spread_error_ms,omitempty"`
	Assumed     ms     `json:"assumed_ms"`
	Unread      string `json:"unread,omitempty"`
}

// clockRate is this host's clock rate against the stream leader's.
type clockRate struct {
	Against string  `json:"against"` // the stream leader
	PPM     float64 `json:"ppm"`     // positive: this host's clock runs fast
	Error   float64 `json:"error_ppm"`
	Span    ms      `json:"span_ms"`
	Assumed float64 `json:"assumed_ppm"`
}

// expiryLag is how long after its TTL the probe key was gone.
type expiryLag struct {
	Lag   ms `json:"lag_ms"`
	Error ms `json:"error_ms"`
}

// stepDown is what a stream-leader step-down cost.
type stepDown struct {
	From string `json:"from"`
	To   string `json:"to"`
	// NewLeader is how long after the request a stream info named the
	// new leader; Write, with --write, how long until an update succeeded.
	NewLeader ms  `json:"new_leader_ms"`
	Write     *ms `json:"write_ms,omitempty"`
	// RetryWindow is the leader's window to retry a renewal at the
	// bucket's TTL: a step-down within it is ridden out wherever it falls.
	RetryWindow ms `json:"retry_window_ms"`
}

// streamElection says whether the bucket's TTL rides out a stream-leader
// election.
type streamElection struct {
	Validity ms `json:"validity_ms"`
	Interval ms `json:"interval_ms"`
	// Within4s and Within9s are how long after its last renewal an election
	// of 4 s and of 9 s may start for a leader to ride it out (0: never),
	// and Share4s and Share9s that as a share of the renewal interval.
	Within4s ms      `json:"within_4s_ms"`
	Within9s ms      `json:"within_9s_ms"`
	Share4s  float64 `json:"share_4s"`
	Share9s  float64 `json:"share_9s"`
	RidesOut bool    `json:"rides_out"` // a 9 s election starting right after a renewal
}

// verifyReport is what election verify measured and concluded.
type verifyReport struct {
	Bucket     string         `json:"bucket"`
	TTL        ms             `json:"ttl_ms"`
	Storage    string         `json:"storage"`
	Cluster    string         `json:"cluster,omitempty"`
	Stream     string         `json:"stream"`
	Replicas   []replicaState `json:"replicas"`
	RoundTrips []roundTrips   `json:"round_trips"`
	// Renewal is the round trip the TTLs are derived from: the p99 of the
	// updates with --write, else of the stream info requests.
	Renewal         ms              `json:"renewal_p99_ms"`
	ExpiryLag       *expiryLag      `json:"expiry_lag,omitempty"`
	Clocks          clocksJSON      `json:"server_clocks"`
	ClockRate       *clockRate      `json:"clock_rate,omitempty"`
	StreamElection  *streamElection `json:"stream_leader_election,omitempty"`
	StepDown        *stepDown       `json:"step_down,omitempty"`
	SmallestSafeTTL *ms             `json:"smallest_safe_ttl_ms,omitempty"`
	RecommendedTTL  *ms             `json:"recommended_ttl_ms,omitempty"`
	NotMeasured     []string        `json:"not_measured,omitempty"`
	verdict                         // as election check's

	lines []string // the text output's measurements, in order
}

func (r *verifyReport) line(format string, args ...any) {
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

// addRoundTrips records t, with a line when it has samples.
func (r *verifyReport) addRoundTrips(t roundTrips) {
	r.RoundTrips = append(r.RoundTrips, t)
	if t.Samples > 0 {
		r.line("round trips of %s: median %s, p99 %s (%d samples)", t.What, formatMS(t.Median.duration()), formatMS(t.P99.duration()), t.Samples)
	}
}
func (r *verifyReport) notMeasured(format string, args ...any) {
	r.NotMeasured = append(r.NotMeasured, fmt.Sprintf(format, args...))
}

// verifyCommand defines the flags of "election verify" and returns them
// with the function that runs it.
func verifyCommand() (*flagSet, runFunc) {
	fs := newFlagSet("election verify", verifyAbout)
	var conn connFlags
	conn.add(fs)
	var cfg verifyConfig
	fs.bucketVar(&cfg.bucket, "the election bucket's `NAME`")
	fs.IntVar(&cfg.samples, "samples", 20, fmt.Sprintf("`N` stream info requests, spread over --duration: %d to %d", minVerifySamples, maxVerifySamples))
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "`DURATION` to spread the samples over, which the clock rate is measured across")
	fs.BoolVar(&cfg.write, "write", false, "also write a probe key: time revision-checked updates, and how long after the TTL it is gone")
	fs.BoolVar(&cfg.stepDown, "step-down", false, "also ask the stream leader to step down, and time the new one (disrupts renewals briefly)")
	fs.BoolVar(&cfg.asJSON, "json", false, "print one JSON object")
	cfg.sys.add(fs)
	return fs, func(args []string, stdout, stderr io.Writer) int {
		usage, code, ok := fs.parseAsCheck(args, stdout, stderr)
		if !ok {
			return code
		}
		switch {
		case fs.NArg() > 0:
			return usage("unexpected argument %q", fs.Arg(0))
		case cfg.samples < minVerifySamples || cfg.samples > maxVerifySamples:
			return usage("--samples %d: want %d to %d", cfg.samples, minVerifySamples, maxVerifySamples)
		case cfg.duration <= 0 || cfg.duration > maxVerifyTime:
			return usage("--duration %v: want above 0, at most %v", cfg.duration, maxVerifyTime)
		}
		if err := cfg.sys.check(); err != nil {
			return usage("%v", err)
		}
		if err := conn.check(); err != nil {
			return usage("%v", err)
		}

		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		// The sampling, a TTL for the probe key with --write, and room for
		// the requests around them.
		ctx, cancel := context.WithTimeout(ctx, cfg.duration+election.MaxTTL+time.Minute)
		defer cancel()
		r := &verifyReport{Bucket: cfg.bucket}
		verify(ctx, &conn, cfg, r)
		r.finish()
		if cfg.asJSON {
			writeJSONIndent(stdout, r)
		} else {
			printVerify(stdout, r)
		}
		return r.Code
	}
}

// verify connects, measures and concludes into r.
func verify(ctx context.Context, conn *connFlags, cfg verifyConfig, r *verifyReport) {
	role := roleObserver
	switch {
	case cfg.stepDown:
		role = roleAdmin
	case cfg.write:
		role = roleCandidate
	}
	ctx, stopWatching := conn.watchDenials(ctx, role)
	defer stopWatching()
	nc, js, err := conn.connect("election verify")
	if err != nil {
		r.unknown(deniedOr(ctx, err))
		return
	}
	defer nc.Close()
	kv, err := openBucket(ctx, js, cfg.bucket)
	if err != nil {
		r.unknown(deniedOr(ctx, err))
		return
	}
	status, err := kv.Status(ctx)
	if err != nil {
		r.unknown(deniedOr(ctx, inDomain(js, fmt.Errorf("reading bucket %q: %w", cfg.bucket, err))))
		return
	}
	bs, ok := status.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		r.unknown(fmt.Errorf("bucket %q: its status carries no stream info", cfg.bucket))
		return
	}
	info := bs.StreamInfo()
	if _, err := election.CheckBucket(ctx, kv); err != nil {
		var be *election.BucketError
		if !errors.As(err, &be) {
			r.unknown(deniedOr(ctx, inDomain(js, err)))
			return
		}
		for _, p := range be.Problems {
			r.critical("bucket %s is unusable for elections: %s", cfg.bucket, p)
		}
		return
	}
	stream, err := js.Stream(ctx, info.Config.Name)
	if err != nil {
		r.unknown(deniedOr(ctx, inDomain(js, fmt.Errorf("opening stream %s: %w", info.Config.Name, err))))
		return
	}

	ttl := status.TTL()
	r.TTL, r.Stream, r.Cluster = msOf(ttl), info.Config.Name, streamCluster(info)
	r.Storage = strings.ToLower(info.Config.Storage.String())
	describeStream(r, info)
	leader, servers := streamServers(info)

	samples := sampleStream(ctx, nc, stream, cfg)
	if ctx.Err() != nil {
		r.unknown(deniedOr(ctx, ctx.Err()))
		return
	}
	streamTrips, pingTrips := samples.roundTrips()
	r.addRoundTrips(streamTrips)
	r.addRoundTrips(pingTrips)
	// The renewal's p99 as measured; the report keeps the figure itself,
	// not one rounded through a Duration's nanoseconds.
	renewalMS, renewalOf := streamTrips.P99, "the stream info requests"
	if streamTrips.Failed > 0 {
		r.warn("%d of %d stream info requests failed (the last: %s)", streamTrips.Failed, streamTrips.Samples+streamTrips.Failed, streamTrips.Error)
	}
	if streamTrips.Samples == 0 {
		r.unknown(fmt.Errorf("no stream info request to %s succeeded: %s", info.Config.Name, streamTrips.Error))
		return
	}

	clocks := readServerClocks(ctx, conn, cfg.sys, servers)
	spread := describeClocks(r, clocks, leader, servers)
	describeRate(r, samples)

	timing := election.TimingFor(ttl, 0)
	if cfg.write {
		updates, lag, err := probeKey(ctx, kv, cfg.samples, ttl)
		if err != nil {
			r.unknown(deniedOr(ctx, inDomain(js, err)))
			return
		}
		r.addRoundTrips(updates)
		renewalMS, renewalOf = updates.P99, "the probe key's updates"
		describeLag(r, lag, ttl, timing)
	} else {
		r.notMeasured("round trips of updates, the path of a renewal: read-only (--write times them); the TTLs below rest on reads, " +
			"which on a replicated bucket miss the follower's acknowledgement a renewal waits for")
		r.notMeasured("key expiry lag after the TTL: read-only (--write writes a probe key and waits it out: %v)", ttl)
	}
	r.Renewal = renewalMS
	renewal := renewalMS.duration()

	replicas := info.Config.Replicas
	if replicas > 1 {
		describeElection(r, timing)
	} else {
		r.notMeasured("stream-leader elections: the bucket has one replica (a restart of its server stops elections instead)")
	}
	switch {
	case !cfg.stepDown && replicas > 1:
		r.notMeasured("stream-leader step-down: not asked (--step-down asks the stream leader to step down and times the new one)")
	case cfg.stepDown && replicas < 2:
		r.notMeasured("stream-leader step-down: the bucket has one replica, with none to take over")
	case cfg.stepDown:
		sd, err := stepDownLeader(ctx, js, stream, kv, cfg.write)
		if err != nil {
			r.unknown(deniedOr(ctx, inDomain(js, err)))
			return
		}
		sd.RetryWindow = msOf(timing.Validity - timing.Interval)
		r.StepDown = sd
		took := sd.NewLeader
		if sd.Write != nil {
			took = max(took, *sd.Write)
		}
		r.line("stream-leader step-down: %s to %s, a new leader after %s%s", sd.From, sd.To, formatMS(sd.NewLeader.duration()),
			writeAfter(sd.Write))
		if took >= sd.RetryWindow {
			r.warn("a stream-leader step-down took %s, past a leader's retry window %s at TTL %v: a rolling restart of the servers can cost the leadership",
				formatMS(took.duration()), formatMS(timing.Validity-timing.Interval), ttl)
		}
	}

	concludeTTL(r, ttl, renewal, renewalOf, spread, replicas)
}

// writeAfter says when the first update after a step-down succeeded.
func writeAfter(write *ms) string {
	if write == nil {
		return ""
	}
	return ", the first update after " + formatMS((*write).duration())
}

// describeStream records the stream's replicas and their state.
func describeStream(r *verifyReport, info *jetstream.StreamInfo) {
	line := fmt.Sprintf("bucket %s: TTL %v, %d replica", r.Bucket, r.TTL.duration(), info.Config.Replicas)
	if info.Config.Replicas != 1 {
		line += "s"
	}
	line += ", " + r.Storage + " storage"
	if r.Cluster != "" {
		line += ", cluster " + r.Cluster
	}
	r.line("%s", line)
	c := info.Cluster
	if c == nil {
		return
	}
	state := []string{"leader " + orNone(c.Leader)}
	if c.Leader != "" {
		r.Replicas = append(r.Replicas, replicaState{Name: c.Leader, Leader: true, Current: true})
	}
	for _, p := range c.Replicas {
		r.Replicas = append(r.Replicas, replicaState{Name: p.Name, Current: p.Current, Offline: p.Offline, Active: msOf(p.Active), Lag: p.Lag})
		switch {
		case p.Offline:
			state = append(state, p.Name+" offline")
			r.warn("replica %s of stream %s is offline", p.Name, info.Config.Name)
		case !p.Current:
			state = append(state, fmt.Sprintf("%s catching up (%d behind)", p.Name, p.Lag))
			r.warn("replica %s of stream %s is catching up, %d operations behind", p.Name, info.Config.Name, p.Lag)
		default:
			state = append(state, fmt.Sprintf("%s current (seen %v ago)", p.Name, p.Active.Round(time.Millisecond)))
		}
	}
	if c.Leader == "" {
		r.warn("stream %s has no leader now", info.Config.Name)
	}
	r.line("stream %s: %s", info.Config.Name, strings.Join(state, ", "))
}

// streamSample is one stream info request: when it was sent and how long
// it took, on this host's monotonic clock, the time on the answer, by the
// stream leader's clock, and that leader.
type streamSample struct {
	sent   time.Time
	rtt    time.Duration
	stamp  time.Time
	leader string
}

// streamSamples are the samples of the stream and of the connection.
type streamSamples struct {
	stream   []streamSample
	failed   int
	lastErr  error
	pings    []time.Duration
	pingErr  error
	pingFail int
	server   string // the connected server
}

// sampleStream makes cfg.samples stream info requests and as many pings of
// the connected server, spread evenly over cfg.duration.
func sampleStream(ctx context.Context, nc *nats.Conn, stream jetstream.Stream, cfg verifyConfig) streamSamples {
	s := streamSamples{server: nc.ConnectedServerName()}
	start := time.Now()
	every := cfg.duration / time.Duration(cfg.samples-1)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := range cfg.samples {
		if i > 0 {
			timer.Reset(time.Until(start.Add(time.Duration(i) * every)))
			select {
			case <-ctx.Done():
				return s
			case <-timer.C:
			}
		}
		sent := time.Now()
		info, err := stream.Info(ctx)
		rtt := time.Since(sent)
		switch {
		case err != nil:
			s.failed, s.lastErr = s.failed+1, err
		default:
			sample := streamSample{sent: sent, rtt: rtt, stamp: info.TimeStamp}
			if info.Cluster != nil {
				sample.leader = info.Cluster.Leader
			}
			s.stream = append(s.stream, sample)
		}
		if rtt, err := nc.RTT(); err != nil {
			s.pingFail, s.pingErr = s.pingFail+1, err
		} else {
			s.pings = append(s.pings, rtt)
		}
	}
	return s
}

// roundTrips sums up the samples' round trips.
func (s streamSamples) roundTrips() (stream, ping roundTrips) {
	rtts := make([]time.Duration, len(s.stream))
	for i, sample := range s.stream {
		rtts[i] = sample.rtt
	}
	stream = summarize("stream info requests, answered by the stream leader", rtts, s.failed, s.lastErr)
	ping = summarize("PING of the connected server "+orNone(s.server), s.pings, s.pingFail, s.pingErr)
	return stream, ping
}

// summarize is the median and p99 of rtts.
func summarize(what string, rtts []time.Duration, failed int, lastErr error) roundTrips {
	t := roundTrips{What: what, Samples: len(rtts), Failed: failed}
	if lastErr != nil {
		t.Error = lastErr.Error()
	}
	if len(rtts) == 0 {
		return t
	}
	sorted := slices.Sorted(slices.Values(rtts))
	t.Median = msOf(sorted[len(sorted)/2])
	t.P99 = msOf(sorted[min(len(sorted)-1, (len(sorted)*99+99)/100-1)])
	return t
}

// serverOffset is the largest difference between the bucket's servers'
// clocks that the TTLs are derived from, and where it comes from.
type serverOffset struct {
	d   time.Duration
	how string // "" with one server, which stamps and ages out every write itself
}

// describeClocks records the servers' clocks, and returns the largest
// difference between the bucket's servers' clocks they allow (its measure
// plus its error bound): the election's assumption when they were not
// read, 0 with one server.
func describeClocks(r *verifyReport, c serverClocks, leader string, servers []string) serverOffset {
	r.Clocks = clocksJSON{Via: c.Via, Assumed: msOf(election.ServerClockOffset), Unread: c.Unread}
	assumed := serverOffset{election.ServerClockOffset, "as far apart as the election assumes"}
	if len(servers) < 2 {
		assumed = serverOffset{}
	}
	if c.Unread != "" {
		r.notMeasured("server clock offsets: %s", c.Unread)
		return assumed
	}
	var each []string
	for _, s := range c.Servers {
		j := clockJSON{Name: s.Name, Offset: msOf(s.Offset), Error: msOf(s.Error), StreamLeader: s.Name == leader, Replica: slices.Contains(servers, s.Name)}
		r.Clocks.Servers = append(r.Clocks.Servers, j)
		item := fmt.Sprintf("%s %s ±%s", s.Name, formatOffset(s.Offset), formatMS(s.Error))
		if j.StreamLeader {
			item += " (stream leader)"
		}
		each = append(each, item)
	}
	r.line("server clocks, less this host's, read through %s: %s", c.Via, strings.Join(each, ", "))
	if len(servers) < 2 {
		r.notMeasured("server clock offsets between the bucket's servers: it has one server")
		return assumed
	}
	d, err, ahead, behind := c.spread(servers)
	if ahead == "" {
		r.notMeasured("server clock offsets between the bucket's servers: none of them answered")
		return assumed
	}
	dm, em := msOf(d), msOf(err)
	r.Clocks.Spread, r.Clocks.SpreadError = &dm, &em
	r.line("the bucket's servers' clocks: within %s ±%s of each other (%s ahead of %s); the election assumes %v",
		formatMS(d), formatMS(err), ahead, behind, election.ServerClockOffset)
	switch {
	case d > election.ServerClockOffset:
		r.critical("%s's clock is %s ±%s ahead of %s's, beyond the %v the election assumes between the bucket's servers: "+
			"keys can age out early and two leaders overlap; run NTP or chrony on every server", ahead, formatMS(d), formatMS(err), behind, election.ServerClockOffset)
	case d > election.ServerClockOffset/2:
		r.warn("%s's clock is %s ±%s ahead of %s's, past half the %v the election assumes between the bucket's servers; check NTP or chrony on every server",
			ahead, formatMS(d), formatMS(err), behind, election.ServerClockOffset)
	}
	return serverOffset{d + err, fmt.Sprintf("%s apart, as measured", formatMS(d+err))}
}

// describeRate records this host's clock rate against the stream leader's,
// from the samples of the longest run of one stream leader: the
// quickest-answered sample of its first and of its last third.
func describeRate(r *verifyReport, s streamSamples) {
	var run []streamSample
	for i := 0; i < len(s.stream); {
		j := i
		for j < len(s.stream) && s.stream[j].leader == s.stream[i].leader && !s.stream[j].stamp.IsZero() {
			j++
		}
		if j-i > len(run) {
			run = s.stream[i:j]
		}
		i = max(j, i+1)
	}
	if len(run) < 3 {
		r.notMeasured("this host's clock rate: too few stream info answers with the server's time from one stream leader")
		return
	}
	third := len(run) / 3
	quickest := func(samples []streamSample) streamSample {
		return slices.MinFunc(samples, func(a, b streamSample) int { return int(a.rtt - b.rtt) })
	}
	a, b := quickest(run[:third]), quickest(run[len(run)-third:])
	local := b.sent.Add(b.rtt / 2).Sub(a.sent.Add(a.rtt / 2))
	server := b.stamp.Sub(a.stamp)
	if local <= 0 || server <= 0 {
		r.notMeasured("this host's clock rate: the server's time did not advance between the samples")
		return
	}
	ppm := (float64(local)/float64(server) - 1) * 1e6
	errPPM := float64(a.rtt/2+b.rtt/2) / float64(server) * 1e6
	assumed := election.ClockRate * 1e6
	r.ClockRate = &clockRate{Against: a.leader, PPM: ppm, Error: errPPM, Span: msOf(local), Assumed: assumed}
	against := "the stream leader's"
	if a.leader != "" {
		against = a.leader + "'s (the stream leader)"
	}
	r.line("this host's clock rate against %s: %+.0f ppm ±%.0f ppm over %v; the election assumes within ±%.0f ppm (%.0f%%)",
		against, ppm, errPPM, local.Round(time.Millisecond), assumed, election.ClockRate*100)
	switch low := math.Abs(ppm) - errPPM; {
	case low > assumed:
		r.critical("this host's clock runs %+.0f ppm ±%.0f ppm against the stream leader's, beyond the ±%.0f ppm the election assumes", ppm, errPPM, assumed)
	case low > assumed/2:
		r.warn("this host's clock runs %+.0f ppm ±%.0f ppm against the stream leader's, past half the ±%.0f ppm the election assumes", ppm, errPPM, assumed)
	}
}

// verifyProbePrefix starts the probe keys of verify --write: under the
// prefix kvelect keeps for its own records, which elections, status and
// the watchers' leaders ignore.
const verifyProbePrefix = "_kvelect.verify."

// probeKey writes a probe key and updates it n times, revision-checked as
// a renewal is, then waits until it is gone: it returns the updates' round
// trips and how long after its TTL, counted from its last update's
// acknowledgement, it was gone, with the error bound of that lag.
func probeKey(ctx context.Context, kv jetstream.KeyValue, n int, ttl time.Duration) (roundTrips, expiryLag, error) {
	key := verifyProbePrefix + strconv.FormatUint(rand.Uint64(), 36)
	rev, err := kv.Create(ctx, key, []byte("verify"))
	if err != nil {
		return roundTrips{}, expiryLag{}, fmt.Errorf("writing the probe key %s: %w", key, err)
	}
	rtts := make([]time.Duration, 0, n)
	var sent, acked time.Time
	for range n {
		sent = time.Now()
		if rev, err = kv.Update(ctx, key, []byte("verify"), rev); err != nil {
			return roundTrips{}, expiryLag{}, fmt.Errorf("updating the probe key %s: %w", key, err)
		}
		acked = time.Now()
		rtts = append(rtts, acked.Sub(sent))
	}
	updates := summarize("revision-checked updates of a probe key, a renewal's path", rtts, 0, nil)

	// Read the key once shortly before the earliest expiry the election
	// assumes, so that a key gone by then is caught before that moment;
	// then poll from shortly before the TTL until the key is gone: its
	// absence is known between the last read that found it and the one
	// that did not.
	const poll = 5 * time.Millisecond
	check := sent.Add(election.TimingFor(ttl, 0).EarliestExpiry - 250*time.Millisecond)
	pollFrom := sent.Add(ttl - 200*time.Millisecond)
	if pollFrom.Before(check) {
		check = pollFrom
	}
	timer := time.NewTimer(time.Until(check))
	defer timer.Stop()
	seen := acked
	for {
		select {
		case <-ctx.Done():
			return roundTrips{}, expiryLag{}, fmt.Errorf("waiting for the probe key %s to age out: %w", key, ctx.Err())
		case <-timer.C:
		}
		asked := time.Now()
		_, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// Gone between seen and the answer to this read; the write was
			// stamped between sent and acked.
			// Dated at the middle of that span, give or take half of it
			// and the write's round trip: gone by then at the latest.
			gone := asked.Add(time.Since(asked) / 2)
			lag := seen.Add(gone.Sub(seen)/2).Sub(acked) - ttl
			bound := gone.Sub(seen)/2 + acked.Sub(sent)
			return updates, expiryLag{Lag: msOf(lag), Error: msOf(bound)}, nil
		case err != nil:
			return roundTrips{}, expiryLag{}, fmt.Errorf("reading the probe key %s: %w", key, err)
		}
		seen = time.Now()
		timer.Reset(max(poll, time.Until(pollFrom)))
	}
}

// describeLag records the probe key's expiry lag, critical if it was gone
// before the earliest expiry the election assumes.
func describeLag(r *verifyReport, lag expiryLag, ttl time.Duration, timing election.Timing) {
	r.ExpiryLag = &lag
	l, e := lag.Lag.duration(), lag.Error.duration()
	r.line("key expiry lag: the probe key was gone %s ±%s after its TTL %v", formatOffset(l), formatMS(e), ttl)
	switch early := -l - e; {
	case ttl+l+e < timing.EarliestExpiry:
		r.critical("the probe key was gone %s before its TTL, before the earliest expiry %v the election assumes: a server's clock runs ahead or fast",
			formatMS(early), timing.EarliestExpiry.Round(time.Millisecond))
	case early > 0:
		r.warn("the probe key was gone %s before its TTL, within what the election assumes: check the servers' clocks", formatMS(early))
	}
}

// describeElection records whether the bucket's TTL rides out a
// stream-leader election.
func describeElection(r *verifyReport, t election.Timing) {
	within := func(x time.Duration) (time.Duration, float64) {
		w := max(t.Validity-x, 0)
		return w, min(float64(w)/float64(t.Interval), 1)
	}
	w4, s4 := within(minStreamLeaderElection)
	w9, s9 := within(maxStreamLeaderElection)
	e := &streamElection{Validity: msOf(t.Validity), Interval: msOf(t.Interval), Within4s: msOf(w4), Within9s: msOf(w9),
		Share4s: s4, Share9s: s9, RidesOut: t.Validity >= maxStreamLeaderElection}
	r.StreamElection = e
	ride := func(x, w time.Duration, share float64) string {
		if w <= 0 {
			return fmt.Sprintf("a %v one never", x)
		}
		return fmt.Sprintf("a %v one that starts within %v of a renewal (%.0f%% of its cycle)", x, w.Round(time.Millisecond), share*100)
	}
	r.line("stream-leader election (%v to %v after the stream leader's server crashes; renewals fail meanwhile): at TTL %v a leader stands down %v after its last renewal and renews every %v: it rides out %s, %s",
		minStreamLeaderElection, maxStreamLeaderElection, t.TTL, t.Validity.Round(time.Millisecond), t.Interval.Round(time.Millisecond),
		ride(minStreamLeaderElection, w4, s4), ride(maxStreamLeaderElection, w9, s9))
	if !e.RidesOut {
		r.warn("at TTL %v a %v stream-leader election outlasts a leader's validity %v even when it starts right after a renewal: such a crash costs the leadership (TTL %v or more rides it out)",
			t.TTL, maxStreamLeaderElection, t.Validity.Round(time.Millisecond), ttlThroughElection())
	}
}

// ttlThroughElection is the smallest whole-second TTL whose validity, at
// the default interval, outlasts the longest stream-leader election: a
// leader then rides out one that starts right after a renewal.
func ttlThroughElection() time.Duration {
	ttl := election.MinTTL
	for election.TimingFor(ttl, 0).Validity < maxStreamLeaderElection {
		ttl += time.Second
	}
	return ttl
}

// smallestSafeTTL is the smallest whole-second TTL, at the default
// interval, whose retry window holds renewalsInWindow renewals of
// round trip renewal, and whose work deadline comes before the earliest
// moment a server whose clock is offset ahead of the stamping one, and runs
// at the assumed rate, can age a write out; false if none up to MaxTTL.
func smallestSafeTTL(renewal, offset time.Duration) (time.Duration, bool) {
	for ttl := election.MinTTL; ttl <= election.MaxTTL; ttl += time.Second {
		t := election.TimingFor(ttl, 0)
		earliest := time.Duration(float64(ttl-offset) / (1 + election.ClockRate))
		if t.Validity-t.Interval >= renewalsInWindow*renewal && t.WorkDeadline < earliest {
			return ttl, true
		}
	}
	return 0, false
}

// concludeTTL records the smallest safe TTL and the recommended one, and
// whether the bucket's TTL is below either.
func concludeTTL(r *verifyReport, ttl, renewal time.Duration, renewalOf string, offset serverOffset, replicas int) {
	if r.ClockRate != nil && math.Abs(r.ClockRate.PPM)-r.ClockRate.Error > r.ClockRate.Assumed {
		r.line("smallest safe TTL: none while this host's clock rate is beyond the assumed %.0f%%", election.ClockRate*100)
		return
	}
	safe, ok := smallestSafeTTL(renewal, offset.d)
	if !ok {
		r.line("smallest safe TTL: none up to %v", election.MaxTTL)
		r.critical("no TTL up to %v is safe with renewals of %s at p99 and the servers' clocks %s apart", election.MaxTTL, formatMS(renewal), formatMS(offset.d))
		return
	}
	t := election.TimingFor(safe, 0)
	sm := msOf(safe)
	r.SmallestSafeTTL = &sm
	clocks := ""
	if offset.how != "" {
		clocks = ", with the servers' clocks " + offset.how
	}
	r.line("smallest safe TTL: %v: %d renewals of %s (the p99 of %s) fit its retry window %v, and its work deadline %v comes before the earliest expiry%s",
		safe, renewalsInWindow, formatMS(renewal), renewalOf, (t.Validity - t.Interval).Round(time.Millisecond), t.WorkDeadline.Round(time.Millisecond), clocks)
	recommended, why := safe, "the smallest safe TTL"
	if through := ttlThroughElection(); replicas > 1 && through > recommended {
		recommended, why = through, fmt.Sprintf("the smallest at which a leader rides out a %v stream-leader election that starts right after a renewal", maxStreamLeaderElection)
	}
	rm := msOf(recommended)
	r.RecommendedTTL = &rm
	r.line("recommended TTL: %v (%s); the bucket's is %v", recommended, why, ttl)
	if ttl < safe {
		r.warn("the bucket's TTL %v is below the smallest safe TTL %v measured here", ttl, safe)
	}
}

// stepDownLeader asks the stream leader to step down, then times how long
// until a stream info names another leader and, with write, until a
// revision-checked update of a probe key succeeds.
func stepDownLeader(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, kv jetstream.KeyValue, write bool) (*stepDown, error) {
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the stream before its step-down: %w", err)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil, fmt.Errorf("stream %s has no leader to step down", info.Config.Name)
	}
	old := info.Cluster.Leader
	var key string
	var rev uint64
	if write {
		key = verifyProbePrefix + strconv.FormatUint(rand.Uint64(), 36)
		if rev, err = kv.Create(ctx, key, []byte("verify")); err != nil {
			return nil, fmt.Errorf("writing the probe key %s: %w", key, err)
		}
	}
	subject := apiPrefix(js) + "STREAM.LEADER.STEPDOWN." + info.Config.Name
	asked := time.Now()
	msg, err := js.Conn().RequestWithContext(ctx, subject, nil)
	if err != nil {
		return nil, fmt.Errorf("asking stream %s's leader to step down (%s): %w", info.Config.Name, subject, err)
	}
	var answer struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &answer); err != nil || !answer.Success {
		why := string(msg.Data)
		if answer.Error != nil {
			why = answer.Error.Description
		}
		return nil, fmt.Errorf("stream %s's leader did not step down: %s", info.Config.Name, why)
	}
	sd := &stepDown{From: old}
	const poll = 10 * time.Millisecond
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for sd.To == "" || (write && sd.Write == nil) {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for stream %s's new leader: %w", info.Config.Name, ctx.Err())
		case <-tick.C:
		}
		if sd.To == "" {
			reqCtx, cancel := context.WithTimeout(ctx, time.Second)
			info, err := stream.Info(reqCtx)
			cancel()
			if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != old {
				sd.To, sd.NewLeader = info.Cluster.Leader, msOf(time.Since(asked))
			}
		}
		if write && sd.Write == nil {
			reqCtx, cancel := context.WithTimeout(ctx, time.Second)
			next, err := kv.Update(reqCtx, key, []byte("verify"), rev)
			cancel()
			if err == nil {
				rev = next
				w := msOf(time.Since(asked))
				sd.Write = &w
			}
		}
	}
	return sd, nil
}

// apiPrefix is the subject prefix of js's JetStream API requests.
func apiPrefix(js jetstream.JetStream) string {
	opts := js.Options()
	switch {
	case opts.Domain != "":
		return "$JS." + opts.Domain + ".API."
	case opts.APIPrefix != "":
		return strings.TrimSuffix(opts.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// printVerify prints r as text: the measurements, what was not measured,
// the findings and the status.
func printVerify(w io.Writer, r *verifyReport) {
	fmt.Fprintf(w, "election verify %s: %s\n", r.Bucket, r.Status)
	for _, l := range r.lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
	for _, n := range r.NotMeasured {
		fmt.Fprintf(w, "  not measured: %s\n", n)
	}
	for _, l := range []struct {
		label string
		items []string
	}{{"unknown", r.Unknowns}, {"critical", r.Criticals}, {"warning", r.Warnings}} {
		for _, item := range l.items {
			fmt.Fprintf(w, "  %s: %s\n", l.label, item)
		}
	}
}
