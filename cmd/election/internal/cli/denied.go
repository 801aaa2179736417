package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// deniedError is a permission the server refused the command.
type deniedError struct {
	action  string // "publish to" or "subscribe to"
	subject string
	role    string // the role that grants it
	serve   string // the subject of the command's leader-only endpoint (--serve), whose permissions the role's grant needs too; "": none
}

func (e *deniedError) Error() string {
	grant := "election permissions --role " + e.role
	if m := bucketOfSubject.FindStringSubmatch(e.subject); m != nil && m[1] != defaultBucket {
		grant += " --bucket " + m[1]
	}
	if e.serve != "" {
		grant += " --serve " + e.serve
	}
	return fmt.Sprintf("permission denied: %s %q (grant the %s role's permissions: %s)", e.action, e.subject, e.role, grant)
}

// bucketOfSubject finds the bucket a denied subject belongs to: a key's
// ($KV.B.), the bucket's stream's (KV_B) or its history's (kvelect.history.B,
// KVELECT_HISTORY_B).
var bucketOfSubject = regexp.MustCompile(`(?:\$KV\.|KV_|KVELECT_HISTORY_|kvelect\.history\.)([-_A-Za-z0-9]+)`)

// violation matches the server's permissions violation as nats.go reports it.
var violation = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]+)"`)

// asDenied returns the permission err reports the server refused, as a
// deniedError naming role, or nil when err is another error.
func asDenied(err error, role string) *deniedError {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	m := violation.FindStringSubmatch(err.Error())
	if m == nil {
		return &deniedError{action: "use", subject: "a subject", role: role}
	}
	action := "publish to"
	if m[1] == "Subscription" {
		action = "subscribe to"
	}
	return &deniedError{action: action, subject: m[2], role: role}
}

// deniedOr returns the permission the server refused while ctx was live
// when that is why ctx ended, and err otherwise: a refused request shows
// itself only as a timeout, so its cause is the better error.
func deniedOr(ctx context.Context, err error) error {
	var denied *deniedError
	if errors.As(context.Cause(ctx), &denied) {
		return denied
	}
	return err
}

// deniableKV is a bucket whose writes, those in flight included, end at
// once once denied is done: when the server denied a candidate a
// permission it needs. Such a candidate can never lead, and a write of its
// left to its own timeout (the candidate record's is up to 5 s) would only
// hold its exit up.
type deniableKV struct {
	jetstream.KeyValue
	denied context.Context
}

// cutOnDenial returns kv as a deniableKV whose writes end once denied is
// done (cancelled with the denial as its cause).
func cutOnDenial(kv jetstream.KeyValue, denied context.Context) jetstream.KeyValue {
	return deniableKV{KeyValue: kv, denied: denied}
}

// cutUnlessLeading ends the writes of a candidate whose election e was
// denied a permission (cut, which ends cutOnDenial's context), unless e
// leads: a leader
// writes on to stand down and release the key. e is nil before the
// election is made.
func cutUnlessLeading(cut context.CancelCauseFunc, e *election.Election, denied error) {
	if e == nil || !e.IsLeader() {
		cut(denied)
	}
}

// bound returns ctx, ended also once the writes are cut, and the function
// that returns a write's error: the denial when the cut ended it.
func (k deniableKV) bound(ctx context.Context) (context.Context, func(error) error) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(k.denied, func() { cancel(context.Cause(k.denied)) })
	return ctx, func(err error) error {
		stop()
		cancel(nil)
		if err != nil && k.denied.Err() != nil {
			return context.Cause(k.denied)
		}
		return err
	}
}

// The writes: each is the bucket's, bound to end once the writes are cut.

func (k deniableKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ctx, end := k.bound(ctx)
	rev, err := k.KeyValue.Put(ctx, key, value)
	return rev, end(err)
}

func (k deniableKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	ctx, end := k.bound(ctx)
	rev, err := k.KeyValue.PutString(ctx, key, value)
	return rev, end(err)
}

func (k deniableKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	ctx, end := k.bound(ctx)
	rev, err := k.KeyValue.Create(ctx, key, value, opts...)
	return rev, end(err)
}

func (k deniableKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	ctx, end := k.bound(ctx)
	rev, err := k.KeyValue.Update(ctx, key, value, revision)
	return rev, end(err)
}

func (k deniableKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	ctx, end := k.bound(ctx)
	return end(k.KeyValue.Delete(ctx, key, opts...))
}

func (k deniableKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	ctx, end := k.bound(ctx)
	return end(k.KeyValue.Purge(ctx, key, opts...))
}
