package cli

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/kvelect/election/sidecar"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSidecarLeaseOnSelfAndEvents: the leader's /self carries a lease
// within its validity and the follower's none; the leader's event stream
// gets a fresh lease after every renewal, each before the lease of the one
// before (counted from its receipt) has run out. At a 3 s TTL that leaves
// a renewal and its event 256 ms, the leader's retry window.
func TestSidecarLeaseOnSelfAndEvents(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	const ttl = 3 * time.Second
	timing := election.TimingFor(ttl, 0)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "SIDE", TTL: ttl})
	a := startSidecar(t, url, "SIDE", "job", "pod-a")
	b := startSidecar(t, url, "SIDE", "job", "pod-b")
	leader := waitSidecarLeader(t, a, b)
	follower := map[*sidecarInstance]*sidecarInstance{a: b, b: a}[leader]

	if code, v, err := leader.self(); err != nil || code != http.StatusOK || v.LeaseMS <= 0 || v.LeaseMS > timing.Validity.Milliseconds() {
		t.Errorf("the leader's /self: %d %+v (%v), want 200 and a lease in (0, %d] ms", code, v, err, timing.Validity.Milliseconds())
	}
	if code, v, err := follower.self(); err != nil || code != http.StatusServiceUnavailable || v.LeaseMS != 0 {
		t.Errorf("the follower's /self: %d %+v (%v), want 503 and no lease", code, v, err)
	}

	stream := openEvents(t, leader)
	first := stream.next(t, "the current state", time.Now().Add(pollTimeout), func(sidecar.Leadership) bool { return true })
	end := time.Now().Add(time.Duration(first.LeaseMS) * time.Millisecond)
	if !first.IsLeader || first.LeaseMS <= 0 {
		t.Fatalf("the leader's first event %+v: want is_leader and a lease", first)
	}
	for renewal := 1; renewal <= 3; renewal++ {
		v := stream.next(t, "a fresh lease", time.Now().Add(timing.Interval+timing.Validity), func(sidecar.Leadership) bool { return true })
		received := time.Now()
		if received.After(end) {
			t.Errorf("renewal %d: the fresh lease came %v after the last ran out", renewal, received.Sub(end))
		}
		if !v.IsLeader || v.Name != leader.name || v.LeaseMS <= timing.Interval.Milliseconds()/2 || v.LeaseMS > timing.Validity.Milliseconds() {
			t.Errorf("renewal %d: event %+v, want %s leading with a lease over half an interval, within its validity %v", renewal, v, leader.name, timing.Validity)
		}
		end = received.Add(time.Duration(v.LeaseMS) * time.Millisecond)
	}
}

// firstEvent returns the first event of base's /events stream.
func firstEvent(t *testing.T, base string) sidecar.Leadership {
	t.Helper()
	client := http.Client{Timeout: pollTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := client.Get(base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := bufio.NewScanner(res.Body)
	for lines.Scan() {
		if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
			var v sidecar.Leadership
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Fatalf("/events sent %q: %v", data, err)
			}
			return v
		}
	}
	t.Fatalf("/events of %s ended before its first event: %v", base, lines.Err())
	return sidecar.Leadership{}
}
