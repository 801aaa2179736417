package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/nats-io/nats.go"
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
