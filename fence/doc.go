// Package fence checks fencing tokens where a leader's work lands, so that
// a paused ex-leader's late write is refused once its successor has
// written. An election gives every leadership a token larger than all
// before it (election.TokenFromContext, Election.Token); a fence keeps,
// for each resource, the highest token it has accepted, and refuses a
// write with a lower one (ErrStale, a *StaleError naming the resource, the
// token and the highest accepted). An equal token is accepted: one leader
// writes many times. It is built on the election package's public API and
// nats.go's jetstream package alone.
//
// Three fences, one rule:
//
//   - KV: the keys of a Key-Value bucket are the resources; KV.Put writes
//     a value with its token.
//   - Stream: the subjects of a stream are the resources; Stream.Append
//     appends a message with its token, for the commonest singleton work,
//     an outbox relay appending to a log.
//   - HTTP: a middleware for a service that receives the leader's work
//     over HTTP; HTTP.Handler refuses a stale Fencing-Token header with
//     409 Conflict.
//
// A fourth, for a SQL database, is a pattern rather than code: a
// fence_token column and a guarded UPDATE (docs/fencing.md, and the module
// examples/fencesql, tested against PostgreSQL).
//
// # Atomicity
//
// The KV and stream fences check the token and write in one step, by
// compare-and-set: they read the resource's latest record (its KV revision,
// or its subject's last sequence), refuse if its token is higher, and write
// on the condition that the record is still the latest (KV Create and
// Update; a publish with Nats-Expected-Last-Subject-Sequence). If another
// write came first the server refuses the write, and the fence reads again
// and retries, refusing if that write's token is higher. The token travels
// in the same record as the data, so one compare-and-set covers both: a
// record with a lower token never follows one with a higher token in a
// resource's history. This holds as long as the compare-and-set is
// linearizable and JetStream keeps acknowledged writes (run the servers
// with sync_interval: always, as for the election bucket).
//
// NATS atomic batch publish (nats-server 2.12 and later, the 2.15.2 these
// tests run included: a stream with AllowAtomicPublish and the
// Nats-Batch-Id, Nats-Batch-Sequence and Nats-Batch-Commit headers) is not
// used: nats.go v1.55.0 offers no client for it (only the stream's
// AllowAtomicPublish setting), KV buckets are not created with it, and a
// batch would still need the compare-and-set to compare tokens. It would
// only matter for writing the token and the data as two messages, which the
// fences avoid by writing them as one.
//
// # Wire forms
//
// Any tool can read and write fenced resources:
//
//   - Stream: the message's Fencing-Token header (election.TokenHeader)
//     holds the token in decimal; the body is the caller's data,
//     untouched. HeaderToken reads it.
//   - KV: the value is the line "Fencing-Token: <token>\n" followed by the
//     data (EncodeValue, DecodeValue), so that nats kv get shows the token.
//     KV values have no headers through the Key-Value API.
//   - HTTP: the request's Fencing-Token header.
//
// A token is decimal digits, from 1 to 18446744073709551615 (ParseToken).
// A resource whose latest record has no token (written around the fence)
// is refused with ErrNotFenced rather than guessed at.
//
// # What a fence does not do
//
// A fence orders writes by leadership; it does not make one leader's work
// run once, nor undo what an ex-leader wrote before its successor's first
// write reached the resource: until then the old token is the highest.
// It remembers the highest token in the resource's latest record: a
// record that ages out, is deleted or purged takes its token with it, and
// any token is accepted there again (NewKV refuses buckets with a TTL; see
// NewStream for the stream limits). Tokens grow only as long as the
// election bucket keeps its acknowledged writes and is not deleted and
// created again. Work that writes to several resources is fenced on each
// separately.
package fence
