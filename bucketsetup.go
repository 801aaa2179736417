package election

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketConfig describes an election bucket for CreateBucket.
//
// Both storage types are safe: a memory bucket expires keys within about
// 10 ms of the TTL, a file bucket about 250 ms after it (see docs/design.md,
// "Limits"), and a leader never counts on a late expiry. A memory bucket
// loses its keys, and its revisions start again, if all of its servers
// restart at once; CheckBucket warns about it.
type BucketConfig struct {
	// Name is the bucket's name: letters, digits, - and _.
	Name string
	// TTL is how long a key lives after its last write: the longest a crashed
	// leader blocks its election. From MinTTL to MaxTTL.
	TTL time.Duration
	// Replicas is the number of servers that store the bucket: 1, 3 or 5;
	// 0 means 1. An even count tolerates no more server failures than the odd
	// count below it.
	Replicas int
	// Storage is jetstream.FileStorage (the zero value) or
	// jetstream.MemoryStorage.
	Storage jetstream.StorageType
	// Placement is where a new bucket lives: a cluster by name, servers by
	// tags; nil places it in the creating client's cluster. In a
	// supercluster it picks the home region, where candidates keep electing
	// through any fault that leaves that region whole (docs/topologies.md).
	// CreateBucket leaves an existing bucket where it is.
	Placement *jetstream.Placement
}

// BucketError lists every setting of a bucket that makes it unusable for
// elections. errors.Is matches it to ErrBucketConfig.
type BucketError struct {
	// Bucket is the bucket's name.
	Bucket string
	// Problems has one line per problem, each saying what is wrong and what
	// is allowed.
	Problems []string
}

// Error lists the problems on one line.
func (e *BucketError) Error() string {
	return fmt.Sprintf("%v: bucket %q: %s", ErrBucketConfig, e.Bucket, strings.Join(e.Problems, "; "))
}

// Unwrap returns ErrBucketConfig, for errors.Is.
func (e *BucketError) Unwrap() error { return ErrBucketConfig }

// validBucket is what nats.go accepts as a bucket name.
var validBucket = regexp.MustCompile(`^[-_a-zA-Z0-9]+$`)

// CheckBucketName returns an error matching ErrBucketConfig, naming what is
// allowed, if name cannot be a bucket's name, and nil if it can.
func CheckBucketName(name string) error {
	if !validBucket.MatchString(name) {
		return fmt.Errorf("%w: bucket name %q: allowed: letters, digits, - and _, at least one", ErrBucketConfig, name)
	}
	return nil
}

// CreateBucket creates the election bucket cfg describes and returns it. If
// the bucket exists, it is left as it is, whatever its settings: it is checked
// with CheckBucket and returned if usable, so call CheckBucket for its
// warnings. A bucket's TTL must not change while elections run on it, so
// CreateBucket never updates one.
//
// A cfg out of bounds gives an error matching ErrBucketConfig, or
// ErrBucketConfig for the TTL, that names the field and what is allowed; an
// unusable existing bucket a *BucketError; a failure to reach the server one
// matching ErrBucketStatus.
func CreateBucket(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (jetstream.KeyValue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      cfg.Name,
			Description: "leader elections (github.com/kvelect/election)",
			TTL:         cfg.TTL,
			Replicas:    max(cfg.Replicas, 1),
			Storage:     cfg.Storage,
			Placement:   cfg.Placement,
		})
		if err == nil {
			return kv, nil
		}
		var apiErr *jetstream.APIError
		switch {
		case errors.Is(err, jetstream.ErrBucketExists):
		case errors.As(err, &apiErr):
			return nil, fmt.Errorf("%w: the server refused bucket %q: %w", ErrBucketConfig, cfg.Name, err)
		default:
			return nil, fmt.Errorf("%w %q: creating it: %w", ErrBucketStatus, cfg.Name, err)
		}
		// Another client created it meanwhile: check theirs.
		kv, err = js.KeyValue(ctx, cfg.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrBucketStatus, cfg.Name, err)
	}
	if _, err := CheckBucket(ctx, kv); err != nil {
		return nil, err
	}
	return kv, nil
}

// Validate says what is wrong with cfg, without asking the server: an error
// matching ErrBucketConfig for the TTL, or ErrBucketConfig for the other
// fields, naming the value and what is allowed. CreateBucket calls it first.
func (cfg BucketConfig) Validate() error {
	if err := CheckBucketName(cfg.Name); err != nil {
		return err
	}
	if p := ttlProblem(cfg.TTL, false); p != "" {
		return fmt.Errorf("%w: %s", ErrBucketConfig, p)
	}
	switch cfg.Replicas {
	case 0, 1, 3, 5:
	default:
		return fmt.Errorf("%w: replicas %d: allowed 1, 3 or 5 (an even count tolerates no more server failures than one fewer)",
			ErrBucketConfig, cfg.Replicas)
	}
	if cfg.Storage != jetstream.FileStorage && cfg.Storage != jetstream.MemoryStorage {
		return fmt.Errorf("%w: storage type %d: allowed jetstream.FileStorage or jetstream.MemoryStorage", ErrBucketConfig, cfg.Storage)
	}
	return nil
}

// CheckBucket reads the settings of an existing bucket and says whether
// elections can run on it. err is a *BucketError listing every setting that
// makes the bucket unusable (no TTL; a TTL outside MinTTL to MaxTTL; a stream
// that discards old messages at a message or byte limit, which evicts keys
// before their TTL; a sealed or mirror stream, which refuses the election's
// writes), or an error matching ErrBucketStatus when the bucket cannot be read.
//
// warnings are settings that keep elections safe but cost something:
//
//   - per-message TTLs (LimitMarkerTTL, or AllowMsgTTL on the stream): a key
//     that vanishes no longer proves it aged out, so failover after a leader
//     crashes takes one TTL longer;
//   - an even number of replicas, which tolerates no more server failures
//     than one fewer;
//   - memory storage, whose keys and revisions do not survive a restart of
//     all the bucket's servers (fencing tokens then start again);
//   - a replicated bucket whose TTL is too short for a leader to ride out a
//     stream-leader election (4–9 s after a server crash): a validity under
//     9 s at the default interval, a TTL under 11 s;
//   - a stream configuration that cannot be read through kv, so the checks
//     above could not be made.
func CheckBucket(ctx context.Context, kv jetstream.KeyValue) (warnings []string, err error) {
	if kv == nil {
		return nil, fmt.Errorf("%w: the bucket is nil; pass a jetstream.KeyValue bound to the election bucket", ErrInvalidArgument)
	}
	status, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrBucketStatus, kv.Bucket(), err)
	}
	var problems []string
	switch ttl := status.TTL(); {
	case ttl == 0:
		problems = append(problems, fmt.Sprintf(
			"no TTL, so a crashed leader's key never expires; allowed: a TTL from %v to %v", MinTTL, MaxTTL))
	case ttlProblem(ttl, false) != "":
		problems = append(problems, ttlProblem(ttl, false))
	}

	bs, ok := status.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		warnings = append(warnings, fmt.Sprintf("cannot read the stream configuration through %T: eviction limits, "+
			"per-message TTLs and replicas are unchecked, and a key that vanishes counts as removed", kv))
	} else {
		sc := bs.StreamInfo().Config
		p, w := checkStream(sc)
		problems, warnings = append(problems, p...), append(warnings, w...)
	}
	if len(problems) > 0 {
		return warnings, &BucketError{Bucket: kv.Bucket(), Problems: problems}
	}
	return warnings, nil
}

// maxStreamLeaderElection is the longest a replicated stream went without a
// leader after its leader's server was killed, on nats-server 2.15.2 with
// its default raft timers (4–9 s: docs/topologies.md): renewals fail
// meanwhile.
const maxStreamLeaderElection = 9 * time.Second

// minTTLThroughElection is the smallest whole-second TTL whose validity, at
// the default interval, outlasts maxStreamLeaderElection.
func minTTLThroughElection() time.Duration {
	ttl := MinTTL
	for TimingFor(ttl, 0).Validity < maxStreamLeaderElection {
		ttl += time.Second
	}
	return ttl
}

// checkStream checks the stream behind a bucket.
func checkStream(sc jetstream.StreamConfig) (problems, warnings []string) {
	if sc.Discard == jetstream.DiscardOld && (sc.MaxMsgs > 0 || sc.MaxBytes > 0) {
		problems = append(problems, fmt.Sprintf(
			"stream %s discards old messages at a limit (max messages %d, max bytes %d), which evicts keys before their TTL; "+
				"allowed: discard policy new, or no message or byte limit", sc.Name, sc.MaxMsgs, sc.MaxBytes))
	}
	if sc.Sealed {
		problems = append(problems, fmt.Sprintf("stream %s is sealed and refuses writes; allowed: an unsealed bucket", sc.Name))
	}
	if sc.Mirror != nil {
		problems = append(problems, fmt.Sprintf(
			"mirrors %s, so its revisions are not the origin's and compare-and-set fails; allowed: the origin bucket", sc.Mirror.Name))
	}
	if sc.AllowMsgTTL {
		warnings = append(warnings, fmt.Sprintf("per-message TTLs are on (expiry markers kept %v): a key that vanishes does not prove "+
			"it aged out, so failover after a leader crash takes one TTL longer; create election buckets without markers",
			sc.SubjectDeleteMarkerTTL))
	}
	if sc.Replicas%2 == 0 {
		warnings = append(warnings, fmt.Sprintf("%d replicas tolerate no more server failures than %d; use 1, 3 or 5",
			sc.Replicas, sc.Replicas-1))
	}
	if sc.Replicas > 1 && sc.MaxAge > 0 && TimingFor(sc.MaxAge, 0).Validity < maxStreamLeaderElection {
		warnings = append(warnings, fmt.Sprintf("a stream-leader election on this R%d bucket (4–%v after its leader's server crashes, "+
			"measured on nats-server 2.15.2) outlasts a leader's validity at TTL %v (%v after its last renewal, at the default interval): "+
			"such a crash costs the leadership; at a TTL of %v or more a leader rides out one that starts early enough in its renewal cycle",
			sc.Replicas, maxStreamLeaderElection, sc.MaxAge, TimingFor(sc.MaxAge, 0).Validity.Round(time.Millisecond), minTTLThroughElection()))
	}
	if sc.Storage == jetstream.MemoryStorage {
		warnings = append(warnings, "memory storage: keys and revisions do not survive a restart of all the bucket's servers, "+
			"and fencing tokens then start again")
	}
	return problems, warnings
}
