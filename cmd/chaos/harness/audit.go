//go:build unix

package harness

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/cmd/chaos/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// recordPrefix is where the bucket's stream republishes every message as it
// stores it (the bucket's RePublish setting): the stream's own record of
// each write, with its revision, which the stream itself keeps only until
// the key's next write or its TTL.
const recordPrefix = "chaos.record."

// audit records the messages of the election bucket's stream to
// audit.jsonl, each revision once: which key and revision hold whose
// value, and which are deletes, purges and expiry markers. The stream's
// leader republishes each message it stores; a connection to every server
// hears it from whichever server leads, even one cut off from its peers.
// An ordered consumer reads the stream as well, for what a republish missed
// while it still holds it. The resolution of the KV check counts the
// revisions neither saw.
type audit struct {
	rec     *record.Recorder
	conns   []*nats.Conn
	consume jetstream.ConsumeContext

	mu   sync.Mutex
	seen map[uint64]bool
}

// startAudit starts recording to path, with one connection to each server
// in urls (comma separated) and an ordered consumer through js.
func startAudit(ctx context.Context, js jetstream.JetStream, urls, path string) (*audit, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	a := &audit{rec: record.New(f, "audit"), seen: map[uint64]bool{}}
	for _, url := range strings.Split(urls, ",") {
		nc, err := nats.Connect(url, nats.Name("chaos-audit"), nats.MaxReconnects(-1),
			nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
		if err != nil {
			a.stop()
			return nil, err
		}
		a.conns = append(a.conns, nc)
		_, err = nc.Subscribe(recordPrefix+">", func(m *nats.Msg) {
			rev, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			a.note(rev, strings.TrimPrefix(m.Subject, recordPrefix), m.Header, m.Data)
		})
		if err != nil {
			a.stop()
			return nil, err
		}
	}
	c, err := js.OrderedConsumer(ctx, "KV_"+worker.BucketName, jetstream.OrderedConsumerConfig{})
	if err == nil {
		a.consume, err = c.Consume(func(m jetstream.Msg) {
			if meta, err := m.Metadata(); err == nil {
				a.note(meta.Sequence.Stream, m.Subject(), m.Headers(), m.Data())
			}
		})
	}
	if err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

// note records the message at revision rev on subject, the first time it
// is seen, with the revision its write required, if any (the header the
// client sent with it, which the stream keeps).
func (a *audit) note(rev uint64, subject string, hdr nats.Header, data []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rev == 0 || a.seen[rev] {
		return
	}
	a.seen[rev] = true
	op := hdr.Get("KV-Operation")
	if reason := hdr.Get("Nats-Marker-Reason"); reason != "" {
		op = "marker-" + reason
	}
	if op == "" {
		op = "PUT"
	}
	ev := record.Event{Kind: "audit", Rev: rev, Op: op, Key: strings.TrimPrefix(subject, fmt.Sprintf("$KV.%s.", worker.BucketName)),
		Worker: string(data), Value: string(data)}
	if expected := hdr.Get(jetstream.ExpectedLastSubjSeqHeader); expected != "" {
		ev.Conditional = true
		ev.Expected, _ = strconv.ParseUint(expected, 10, 64)
	}
	a.rec.Record(ev)
}

// Stop waits for what each server has sent so far, and stops recording.
func (a *audit) stop() {
	for _, nc := range a.conns {
		nc.FlushTimeout(time.Second)
		nc.Close()
	}
	if a.consume != nil {
		a.consume.Stop()
	}
}

// recordLastRevision records the last revision of the bucket's stream once
// every worker has stopped ("last-revision"): the revisions up to it that
// the audit did not see are those the KV check cannot attribute.
func (h *Harness) recordLastRevision() {
	err := worker.Retry(context.Background(), 2*time.Second, func(ctx context.Context) error {
		s, err := h.js.Stream(ctx, "KV_"+worker.BucketName)
		if err != nil {
			return err
		}
		h.rec.Record(record.Event{Kind: "last-revision", Rev: s.CachedInfo().State.LastSeq})
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: the bucket's last revision:", err)
	}
}
