package election

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The wire format: every key and value kvelect writes in an election
// bucket, and the helpers that format and parse them. A reader of the bucket
// (nats kv watch, say) sees, for an election key KEY and candidates A and B:
//
//	key                             value                   written by, and what it says
//	KEY                             A                       A's claim (over a free key) or renewal (over its own
//	                                                        latest revision): A holds KEY
//	KEY                             released:A              A, after standing down and once its work returned,
//	                                                        over its own latest revision, or over another
//	                                                        client's removal or its own draining mark (a vouch):
//	                                                        KEY is free, and a winner over it announces at once
//	KEY                             handoff:B               A, as released:, handing KEY to B: B claims it at
//	                                                        once, everyone else (A too) keeps away half a TTL
//	KEY                             draining:A for 1.234s   A, over another client's removal of its key while
//	                                                        its work still runs: claimable once the time named
//	                                                        has surely passed (drain.go)
//	KEY                             done:A                  Election.Once of A, its work done: nobody claims
//	                                                        KEY until it ages out a TTL later
//	KEY                             (delete or purge)       another client, or the server (an expiry marker):
//	                                                        KEY is free, and a winner waits out the announce
//	                                                        delay unless the old leader vouches
//	_kvelect.request.KEY            resign                  Bucket.Resign: the leader of KEY stands down
//	_kvelect.request.KEY            transfer:B              Bucket.Transfer, or a higher priority started with
//	                                                        the leader: the leader hands KEY to B
//	_kvelect.candidate.KEY.<name>   {"name":"A",…}          A's candidate record (JSON, candidateRecord), every
//	                                                        third of a TTL, deleted when it stops; <name> is
//	                                                        the name in unpadded base64url (presence.go)
//	_kvelect.verify.<n>             verify                  election verify --write (the command): a probe key
//	                                                        that elections ignore
//
// Names and keys cannot hold a colon (CheckCandidate, CheckKey), so no
// holder's name reads as a release, handoff, draining or done mark, and no
// election key starts with "_kvelect.". Values are read by prefix; a value
// with none of these prefixes names its holder.

// TokenHeader is the header that carries a leadership's fencing token
// (Token, TokenFromContext) in decimal on a message or an HTTP request or
// response: on the replies of a leader-only endpoint, on the requests
// election sidecar and election run forward to the app, and where a fence
// reads it. One name everywhere, so that a token can travel from the leader
// to the resource that checks it.
const TokenHeader = "Fencing-Token"

// Requests to a key's leader travel through the bucket: Bucket.Resign and
// Bucket.Transfer write the key "_kvelect.request." and the election key,
// which every candidate of the key watches. The leader acts on a request
// written after its own claim (a higher revision), so a request is served
// once, by the leader it was meant for, and ages out with the bucket's TTL.
const (
	// reservedPrefix starts every key kvelect writes for itself; no election
	// key may start with it.
	reservedPrefix = "_kvelect."
	requestPrefix  = reservedPrefix + "request."
	resignRequest  = "resign"
	transferPrefix = "transfer:"
)

func requestKey(key string) string { return requestPrefix + key }

// requestValue is the request asking the leader to hand the key to the
// candidate to ("": a resignation, to any other candidate).
func requestValue(to string) string {
	if to == "" {
		return resignRequest
	}
	return transferPrefix + to
}

// parseRequest returns the candidate a request asks the leader to hand the
// key to: "" for a resignation (any other candidate).
func parseRequest(value []byte) (to string, ok bool) {
	if string(value) == resignRequest {
		return "", true
	}
	to, ok = strings.CutPrefix(string(value), transferPrefix)
	return to, ok && to != ""
}

// A leader that gives up the key after standing down writes over it one of
// two values, both releases: "released:" and its own name when it stops or
// resigns, or "handoff:" and the name of the candidate it hands the key to.
// NewElection refuses names that start with either prefix, so no holder's
// value can be mistaken for a release.
const (
	releasePrefix = "released:"
	handoffPrefix = "handoff:"
)

// releaseValue is the release of the candidate name.
func releaseValue(name string) string { return releasePrefix + name }

// handoffValue is the handoff naming the candidate to.
func handoffValue(to string) string { return handoffPrefix + to }

func isRelease(value []byte) bool {
	return strings.HasPrefix(string(value), releasePrefix) || strings.HasPrefix(string(value), handoffPrefix)
}

// releasedBy returns the candidate whose release value is, if it is one.
func releasedBy(value string) (string, bool) {
	return strings.CutPrefix(value, releasePrefix)
}

// handoffTarget returns the candidate a handoff names, if value is one.
func handoffTarget(value string) (string, bool) {
	return strings.CutPrefix(value, handoffPrefix)
}

// donePrefix marks a key whose work Election.Once ran: "done:" and the name
// of the candidate that ran it. The marker holds the key like a holder that
// does not renew, so that nobody runs the work again until it ages out a TTL
// later. NewElection refuses names that start with it.
const donePrefix = "done:"

// doneValue is the done mark of the candidate name.
func doneValue(name string) string { return donePrefix + name }

func isDone(value []byte) bool {
	return strings.HasPrefix(string(value), donePrefix)
}

// doneBy returns the candidate whose done mark value is, if it is one.
func doneBy(value string) (string, bool) {
	return strings.CutPrefix(value, donePrefix)
}

// drainingPrefix starts the draining mark a leader writes over a removal of
// its key while its work stops (drain.go says when and why): "draining:"
// and its name, " for " and how long until its last write's earliest
// expiry. Like a release, a mark is never written by hand: names cannot
// hold a colon.
const drainingPrefix = "draining:"

// drainingSep separates the name from the time left in a draining mark.
const drainingSep = " for "

// drainingValue is the draining mark of the candidate name whose work stops
// within left, rounded up to the millisecond.
func drainingValue(name string, left time.Duration) string {
	if r := left.Truncate(time.Millisecond); r != left {
		left = r + time.Millisecond
	}
	return drainingPrefix + name + drainingSep + left.String()
}

func isDraining(value []byte) bool {
	return strings.HasPrefix(string(value), drainingPrefix)
}

// drainingLeft parses a draining mark: the time its writer's work had left
// when it wrote it. ok is false for a value that is no well-formed mark.
func drainingLeft(value []byte) (left time.Duration, ok bool) {
	rest, ok := strings.CutPrefix(string(value), drainingPrefix)
	if !ok {
		return 0, false
	}
	i := strings.LastIndex(rest, drainingSep)
	if i < 0 {
		return 0, false
	}
	left, err := time.ParseDuration(rest[i+len(drainingSep):])
	if err != nil || left < 0 {
		return 0, false
	}
	return left, true
}

// drainingName returns the name of a draining mark's writer.
func drainingName(value []byte) string {
	rest, _ := strings.CutPrefix(string(value), drainingPrefix)
	if i := strings.LastIndex(rest, drainingSep); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// Every running election keeps a record of its candidacy in the bucket, so
// that any process can tell who campaigns for a key: the key
// "_kvelect.candidate." + election key + "." + the name in unpadded base64url
// (which has no dots, so the election key is everything before the last
// dot). presence.go says when it is written and who reads it.
const candidatePrefix = reservedPrefix + "candidate."

// candidateRecord is the value of a candidate's record.
type candidateRecord struct {
	Name     string            `json:"name"`
	Priority int               `json:"priority"`
	Since    time.Time         `json:"since"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// RoundTripMS is the median of the candidate's recent round trips to
	// the bucket, in milliseconds.
	RoundTripMS float64 `json:"round_trip_ms,omitempty"`
	Writer      Writer  `json:"writer"`
	// ClockRate is the latest measured ClockCheck.Rate, to six decimals.
	ClockRate float64 `json:"clock_rate,omitempty"`
	// Unhealthy says why the candidate's health check fails, while it does.
	Unhealthy string `json:"unhealthy,omitempty"`
}

func candidateKey(key, name string) string {
	return candidatePrefix + key + "." + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// candidateKeys is the filter that matches every candidate record's key of
// the election key.
func candidateKeys(key string) string { return candidatePrefix + key + ".*" }

// recordValue is the value of the record r.
func recordValue(r candidateRecord) ([]byte, error) { return json.Marshal(r) }

// recordOf reads entry as a candidate's record, or returns nil if it is
// not a live one: there is no entry, its key is not a record's, it was
// deleted, or it is not valid.
func recordOf(entry jetstream.KeyValueEntry) *candidateRecord {
	if entry == nil || entry.Operation() != jetstream.KeyValuePut {
		return nil
	}
	if _, ok := electionKeyOf(entry.Key()); !ok {
		return nil
	}
	var r candidateRecord
	if json.Unmarshal(entry.Value(), &r) != nil || r.Name == "" {
		return nil
	}
	return &r
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
