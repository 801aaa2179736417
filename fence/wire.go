package fence

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go"
)

// The wire forms, for any tool that reads or writes fenced resources:
//
//	fence         where the token is                          example
//	Stream        the message's Fencing-Token header          Fencing-Token: 42   (body: the caller's data, untouched)
//	KV            the value's first line, then the data       "Fencing-Token: 42\n" + data
//	HTTP          the request's Fencing-Token header          Fencing-Token: 42
//
// A token is a decimal integer from 1 to 18446744073709551615 (the
// election's Token, TokenFromContext), without sign or spaces.

// valuePrefix starts every value the KV fence writes.
const valuePrefix = election.TokenHeader + ": "

// tokenRule says what a token may be, for error messages.
const tokenRule = "a decimal integer from 1 to 18446744073709551615 (the leader's election.TokenFromContext)"

// ParseToken parses a fencing token as the wire forms carry it: decimal
// digits only, from 1 to the largest uint64. It is what the HTTP fence and
// HeaderToken accept; the error says what is wrong and what is allowed, and
// matches ErrInvalidArgument.
func ParseToken(s string) (uint64, error) {
	if s == "" {
		return 0, invalidf("empty fencing token: want %s", tokenRule)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, invalidf("fencing token %q is not %s", s, tokenRule)
		}
	}
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil || t == 0 {
		return 0, invalidf("fencing token %q is not %s", s, tokenRule)
	}
	return t, nil
}

// HeaderToken returns the fencing token in the Fencing-Token header
// (election.TokenHeader) of a NATS message's headers, as the stream fence
// writes it. It returns an error matching ErrNotFenced if the header is
// missing, repeated or not a valid token.
func HeaderToken(h nats.Header) (uint64, error) {
	vs := h.Values(election.TokenHeader)
	switch len(vs) {
	case 0:
		return 0, fmt.Errorf("%w: no %s header", ErrNotFenced, election.TokenHeader)
	case 1:
	default:
		return 0, fmt.Errorf("%w: %d %s headers %q, want one", ErrNotFenced, len(vs), election.TokenHeader, vs)
	}
	t, err := ParseToken(vs[0])
	if err != nil {
		return 0, fmt.Errorf("%w: %s header: %w", ErrNotFenced, election.TokenHeader, err)
	}
	return t, nil
}

// EncodeValue returns the value the KV fence stores for data written with
// token: the line "Fencing-Token: <token>\n", then data unchanged.
func EncodeValue(token uint64, data []byte) []byte {
	v := make([]byte, 0, len(valuePrefix)+20+1+len(data))
	v = append(v, valuePrefix...)
	v = strconv.AppendUint(v, token, 10)
	v = append(v, '\n')
	return append(v, data...)
}

// DecodeValue splits a value the KV fence stored into its token and the
// data written with it, for readers of the bucket (a Get, a watcher). It
// returns an error matching ErrNotFenced for a value that is not in that
// form.
func DecodeValue(value []byte) (token uint64, data []byte, err error) {
	rest, ok := bytes.CutPrefix(value, []byte(valuePrefix))
	if !ok {
		return 0, nil, fmt.Errorf("%w: the value does not start with %q", ErrNotFenced, valuePrefix)
	}
	line, data, ok := bytes.Cut(rest, []byte{'\n'})
	if !ok {
		return 0, nil, fmt.Errorf("%w: the value's %s line has no end", ErrNotFenced, election.TokenHeader)
	}
	t, err := ParseToken(string(line))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrNotFenced, err)
	}
	return t, data, nil
}

// checkToken refuses the zero token: no leadership has it (Token returns 0
// when not leading).
func checkToken(token uint64) error {
	if token == 0 {
		return invalidf("fencing token 0: no leadership has it (election.Token returns 0 when not leading); want 1 to %d", uint64(math.MaxUint64))
	}
	return nil
}

// validKey is the KV key rule of nats.go.
var validKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

// checkKey checks a KV fence's resource: a key as nats.go allows it.
func checkKey(resource string) error {
	if resource == "" {
		return invalidf("empty resource: want a KV key")
	}
	if !validKey.MatchString(resource) || strings.HasPrefix(resource, ".") || strings.HasSuffix(resource, ".") {
		return invalidf("resource %q is not a valid KV key: want letters, digits and - / _ = . only, not starting or ending with a dot", resource)
	}
	return nil
}

// checkSubject checks a stream fence's subject: a literal subject, no
// wildcard, no empty token, no whitespace.
func checkSubject(subject string) error {
	if subject == "" {
		return invalidf("empty subject: want a literal NATS subject of the stream")
	}
	for _, tok := range strings.Split(subject, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return invalidf("subject %q is not a literal NATS subject: want dot-separated tokens, none empty, no wildcard (* or >), no whitespace", subject)
		}
	}
	return nil
}
