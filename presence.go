package election

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Every running election keeps a record of its candidacy in the bucket, so
// that any process can tell who campaigns for a key: the key
// "_kvelect.candidate." + election key + "." + the name in unpadded base64url
// (which has no dots, so the election key is everything before the last
// dot). The record is written when the election starts, written again every
// third of a TTL, and deleted when it stops; a crashed candidate's record is
// live until a TTL after its last write. Records carry no authority: the
// election itself never depends on them, only what is read from them
// (Candidates, and a transfer's check that its target campaigns).
const (
	candidatePrefix = reservedPrefix + "candidate."
	// presenceRefreshes is how many times per TTL a record is rewritten,
	// so that one late write does not make a live candidate look gone.
	presenceRefreshes = 3
)

// Candidate is an election's candidate as the bucket's watcher sees it.
type Candidate struct {
	Key      string
	Name     string
	Priority int // see WithPriority
	// Since is when the candidate began campaigning, by its own clock.
	Since time.Time
	// Metadata is what the candidate published with WithMetadata.
	Metadata map[string]string
	// RoundTrip is the median of the candidate's recent round trips to the
	// bucket's stream leader (its last 16 KV calls that the server
	// answered; timeouts measure nothing), as of its latest
	// record: a candidate in another region than the bucket shows it. 0
	// before it measured any.
	RoundTrip time.Duration
}

// candidateRecord is the value of a candidate's record.
type candidateRecord struct {
	Name     string            `json:"name"`
	Priority int               `json:"priority"`
	Since    time.Time         `json:"since"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// RoundTripMS is the median of the candidate's recent round trips to
	// the bucket, in milliseconds.
	RoundTripMS float64 `json:"round_trip_ms,omitempty"`
}

func candidateKey(key, name string) string {
	return candidatePrefix + key + "." + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// candidateOf reads a candidate's record, or returns false if entry is not
// a live one: its key is not a record's, it was deleted, or it is not valid.
func candidateOf(entry jetstream.KeyValueEntry) (Candidate, bool) {
	electionKey, ok := electionKeyOf(entry.Key())
	if !ok || entry.Operation() != jetstream.KeyValuePut {
		return Candidate{}, false
	}
	var r candidateRecord
	if json.Unmarshal(entry.Value(), &r) != nil || r.Name == "" {
		return Candidate{}, false
	}
	rtt := time.Duration(r.RoundTripMS * float64(time.Millisecond))
	return Candidate{Key: electionKey, Name: r.Name, Priority: r.Priority, Since: r.Since, Metadata: r.Metadata, RoundTrip: rtt}, true
}

// electionKeyOf returns the election key of a candidate record's key.
func electionKeyOf(recordKey string) (string, bool) {
	rest, ok := strings.CutPrefix(recordKey, candidatePrefix)
	dot := strings.LastIndexByte(rest, '.')
	if !ok || dot < 0 {
		return "", false
	}
	return rest[:dot], true
}

// maxMetadata bounds the size of a candidate's metadata, keys and values
// together: the record is rewritten every third of a TTL.
const maxMetadata = 64 << 10

// WithMetadata publishes metadata with the candidate's record, for every
// process to read with Bucket.Candidates: a node's labels, capacity,
// version, what it can run. At most 64 KiB, keys and values together; the
// map is copied.
func WithMetadata(metadata map[string]string) Option {
	copied := make(map[string]string, len(metadata))
	for k, v := range metadata {
		copied[k] = v
	}
	return func(o *options) { o.metadata = copied }
}

// checkMetadata says what is wrong with metadata for a candidate whose
// record is on (or off, noPresence).
func checkMetadata(metadata map[string]string, noPresence bool) error {
	size := 0
	for k, v := range metadata {
		if k == "" {
			return fmt.Errorf("%w: metadata with an empty key", ErrInvalidArgument)
		}
		size += len(k) + len(v)
	}
	switch {
	case size > maxMetadata:
		return fmt.Errorf("%w: metadata of %d bytes, want at most %d", ErrInvalidArgument, size, maxMetadata)
	case len(metadata) > 0 && noPresence:
		return fmt.Errorf("%w: metadata travels in the candidate record, which WithoutPresence turns off", ErrInvalidArgument)
	}
	return nil
}

// SetMetadata replaces the metadata the candidate publishes (see
// WithMetadata), within the same limits: a running election rewrites its
// record at once, so that Bucket.Candidates in every process reads the new
// metadata after one round trip. It is for what changes while the election
// runs: a state, a load, what the leader is doing.
func (e *Election) SetMetadata(metadata map[string]string) error {
	if err := checkMetadata(metadata, e.opts.noPresence); err != nil {
		return err
	}
	copied := make(map[string]string, len(metadata))
	for k, v := range metadata {
		copied[k] = v
	}
	e.mu.Lock()
	e.metadata = copied
	e.mu.Unlock()
	select {
	case e.republish <- struct{}{}:
	default:
	}
	return nil
}

// Candidates returns the live candidates of key: the elections for it that
// run (in any process), once the bucket's watcher has read the bucket (ctx
// bounds that wait). A candidate that stopped is gone at once; one that
// crashed or was cut off is gone a TTL after its last write.
func (b *Bucket) Candidates(ctx context.Context, key string) ([]Candidate, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := b.awaitReady(ctx); err != nil {
		return nil, err
	}
	return b.hub.candidates(key, b.info.ttl), nil
}

// AllCandidates returns the live candidates of every key of the bucket, by
// key, as Candidates does for one.
func (b *Bucket) AllCandidates(ctx context.Context) (map[string][]Candidate, error) {
	if err := b.awaitReady(ctx); err != nil {
		return nil, err
	}
	byKey := map[string][]Candidate{}
	for _, c := range b.hub.candidates("", b.info.ttl) {
		byKey[c.Key] = append(byKey[c.Key], c)
	}
	return byKey, nil
}

// present keeps this election's candidate record in the bucket until ctx
// is done, then deletes it. A failed write is logged and tried again at the
// next refresh: the record informs others, and the election does not depend
// on it.
func (c *campaigner) present(ctx context.Context) {
	since := c.now().UTC()
	key := candidateKey(c.key, c.name)
	tick := time.NewTicker(c.clock.Real(c.timing.ttl / presenceRefreshes))
	defer tick.Stop()
	for {
		c.mu.Lock()
		metadata := c.metadata
		c.mu.Unlock()
		rtt := float64(c.rtt.median().Round(time.Microsecond)) / float64(time.Millisecond) // to the microsecond: no float noise in the record
		value, err := json.Marshal(candidateRecord{Name: c.name, Priority: c.opts.priority, Since: since, Metadata: metadata, RoundTripMS: rtt})
		if err != nil {
			c.log.Error("encoding the candidate record", "error", err)
			return
		}
		opCtx, cancel := context.WithTimeout(ctx, c.timing.opTimeout)
		sent := c.now()
		_, err = c.kv.Put(opCtx, key, value)
		c.roundTrip(sent, err)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("writing the candidate record", errAttrs(err)...)
		}
		cancel()
		select {
		case <-ctx.Done():
			opCtx, cancel := context.WithTimeout(context.Background(), c.timing.opTimeout)
			defer cancel()
			if err := c.kv.Delete(opCtx, key); err != nil {
				c.log.Warn("deleting the candidate record", "error", err)
			}
			return
		case <-tick.C:
		case <-c.republish:
		}
	}
}
