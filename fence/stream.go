package fence

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream is a fence on the subjects of a JetStream stream, for work that
// appends to a log (an outbox relay, say): each subject is a resource, each
// message carries the token it was appended with in its Fencing-Token
// header, and Append adds a message only if the subject's last message
// carries no higher token, by compare-and-set on that message's sequence
// (Nats-Expected-Last-Subject-Sequence). It is safe for concurrent use.
type Stream struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	name   string
}

// NewStream returns a fence on the subjects of stream, publishing through
// js. The error matches ErrInvalidArgument for a nil js or stream.
//
// The fence remembers a subject's highest token in the subject's last
// message: a stream that can remove it (MaxAge, or MaxMsgs or MaxBytes with
// the old messages discarded, a purge) forgets the token, and the fence then
// accepts any token on that subject. MaxMsgsPerSubject of one or more keeps
// it.
func NewStream(js jetstream.JetStream, stream jetstream.Stream) (*Stream, error) {
	if js == nil {
		return nil, invalidf("nil JetStream")
	}
	if stream == nil {
		return nil, invalidf("nil stream")
	}
	info := stream.CachedInfo()
	if info == nil || info.Config.Name == "" {
		return nil, invalidf("stream without cached info: bind it with JetStream.Stream or CreateStream")
	}
	return &Stream{js: js, stream: stream, name: info.Config.Name}, nil
}

// Append appends data to subject with the fencing token in its
// Fencing-Token header, unless the subject's last message carries a higher
// token: then it appends nothing and returns a *StaleError
// (errors.Is(err, ErrStale)). An equal token is accepted. It returns the
// message's stream sequence. See AppendMsg.
func (f *Stream) Append(ctx context.Context, subject string, token uint64, data []byte) (seq uint64, err error) {
	return f.AppendMsg(ctx, token, &nats.Msg{Subject: subject, Data: data})
}

// AppendMsg is Append for a message with headers of its own (a
// Nats-Msg-Id, say): msg is not changed; the message appended is a copy
// with its Fencing-Token header set to token.
//
// The check and the append are one compare-and-set on the sequence of the
// subject's last message read: if another append lands in between, the
// server refuses this one and AppendMsg reads again and retries, refusing if
// that append's token is higher. So no message follows one with a higher
// token on a subject, whatever the interleaving.
//
// It returns an error matching ErrInvalidArgument for an invalid subject or
// a zero token, ErrNotFenced if the subject's last message carries no
// valid Fencing-Token header (something appends around the fence), and the
// server's error (wrapped) otherwise, or if ctx ends.
func (f *Stream) AppendMsg(ctx context.Context, token uint64, msg *nats.Msg) (seq uint64, err error) {
	if msg == nil {
		return 0, invalidf("nil message")
	}
	if err := checkSubject(msg.Subject); err != nil {
		return 0, err
	}
	if err := checkToken(token); err != nil {
		return 0, err
	}
	for {
		var lastSeq uint64
		last, err := f.Last(ctx, msg.Subject)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return 0, err
		case last.Token > token:
			return 0, &StaleError{Resource: msg.Subject, Token: token, Highest: last.Token}
		default:
			lastSeq = last.Revision
		}
		m := &nats.Msg{Subject: msg.Subject, Data: msg.Data, Header: nats.Header{}}
		for k, vs := range msg.Header {
			m.Header[k] = append([]string(nil), vs...)
		}
		m.Header.Set(election.TokenHeader, fmt.Sprint(token))
		ack, err := f.js.PublishMsg(ctx, m, jetstream.WithExpectStream(f.name), jetstream.WithExpectLastSequencePerSubject(lastSeq))
		if isWrongLastSequence(err) {
			continue // another append came first (or the read was stale): check again
		}
		if err != nil {
			return 0, fmt.Errorf("fence: appending to subject %q of stream %s with token %d: %w", msg.Subject, f.name, token, err)
		}
		return ack.Sequence, nil
	}
}

// Last returns the subject's last message as a Record: its data, the token
// in its Fencing-Token header and its sequence. It returns an error
// matching jetstream.ErrMsgNotFound if the subject has no message, and
// ErrNotFenced if the last message carries no valid token.
func (f *Stream) Last(ctx context.Context, subject string) (Record, error) {
	if err := checkSubject(subject); err != nil {
		return Record{}, err
	}
	m, err := f.stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return Record{}, fmt.Errorf("fence: reading the last message of subject %q of stream %s: %w", subject, f.name, err)
	}
	token, err := HeaderToken(m.Header)
	if err != nil {
		return Record{}, fmt.Errorf("subject %q of stream %s, sequence %d: %w", subject, f.name, m.Sequence, err)
	}
	return Record{Resource: subject, Token: token, Data: m.Data, Revision: m.Sequence}, nil
}

// isWrongLastSequence reports whether err is the server's refusal of a
// compare-and-set: 10071, or 10164 on a replicated stream (another
// compare-and-set on the subject is in flight).
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
