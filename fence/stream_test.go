package fence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kvelect/election"
	"github.com/kvelect/election/fence"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// streamFence returns a stream fence on a fresh stream OUTBOX (subjects
// outbox.>) of its own server, and the stream.
func streamFence(t *testing.T) (*fence.Stream, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	_, js := testenv.Connect(t, testenv.Server(t).ClientURL())
	s, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "OUTBOX", Subjects: []string{"outbox.>"}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fence.NewStream(js, s)
	if err != nil {
		t.Fatal(err)
	}
	return f, js, s
}

func TestStreamAcceptsEqualAndHigherTokensAndRefusesLower(t *testing.T) {
	ctx := context.Background()
	f, _, s := streamFence(t)
	for _, w := range []struct {
		token uint64
		stale bool
	}{{5, false}, {5, false}, {9, false}, {5, true}, {8, true}, {9, false}} {
		_, err := f.Append(ctx, "outbox.a", w.token, []byte("x"))
		if w.stale {
			checkStale(t, err, "outbox.a", w.token, 9)
		} else if err != nil {
			t.Fatalf("Append with token %d: %v", w.token, err)
		}
	}
	// Each subject is a resource of its own.
	if _, err := f.Append(ctx, "outbox.b", 1, []byte("x")); err != nil {
		t.Fatalf("Append to another subject: %v", err)
	}
	// The wire form: the token in the Fencing-Token header, the body as given.
	m, err := s.GetLastMsgForSubject(ctx, "outbox.a")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(election.TokenHeader); got != "9" || string(m.Data) != "x" {
		t.Fatalf("the last message has %s %q and body %q, want 9 and the data", election.TokenHeader, got, m.Data)
	}
}

func TestStreamAppendMsgKeepsTheCallersHeadersAndMessage(t *testing.T) {
	ctx := context.Background()
	f, _, s := streamFence(t)
	msg := &nats.Msg{Subject: "outbox.a", Data: []byte("x"), Header: nats.Header{"Nats-Msg-Id": {"order-1"}}}
	if _, err := f.AppendMsg(ctx, 3, msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Header) != 1 {
		t.Errorf("AppendMsg changed the caller's headers: %v", msg.Header)
	}
	m, err := s.GetLastMsgForSubject(ctx, "outbox.a")
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("Nats-Msg-Id") != "order-1" || m.Header.Get(election.TokenHeader) != "3" {
		t.Errorf("the appended message's headers are %v", m.Header)
	}
}

func TestStreamRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	f, js, _ := streamFence(t)
	for _, c := range []struct {
		subject string
		token   uint64
		want    string
	}{
		{"", 1, "empty subject"},
		{"outbox.a", 0, "fencing token 0"},
		{"outbox.*", 1, "no wildcard"},
		{"outbox.>", 1, "no wildcard"},
		{"outbox..a", 1, "none empty"},
		{"outbox.a b", 1, "no whitespace"},
	} {
		_, err := f.Append(ctx, c.subject, c.token, nil)
		if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Append(%q, %d): %v, want ErrInvalidArgument saying %q", c.subject, c.token, err, c.want)
		}
	}
	if _, err := f.AppendMsg(ctx, 1, nil); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Errorf("AppendMsg(nil): %v, want ErrInvalidArgument", err)
	}
	// A message appended around the fence is not taken for any token.
	for _, h := range []nats.Header{nil, {election.TokenHeader: {"x"}}, {election.TokenHeader: {"1", "2"}}} {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "outbox.plain", Header: h}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Append(ctx, "outbox.plain", 7, nil); !errors.Is(err, fence.ErrNotFenced) {
			t.Errorf("Append over a message with headers %v: %v, want ErrNotFenced", h, err)
		}
	}
	if _, err := fence.NewStream(js, nil); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Errorf("NewStream(js, nil): %v, want ErrInvalidArgument", err)
	}
}

func TestStreamConcurrentAppendersNeverStoreADecreasingToken(t *testing.T) {
	ctx := context.Background()
	f, _, s := streamFence(t)
	writes := concurrently(8, 25, func(token uint64) (uint64, error) {
		return f.Append(ctx, "outbox.log", token, fmt.Appendf(nil, "%d", token))
	})
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"outbox.log"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var revs []uint64
	tokens := map[uint64]uint64{}
	for len(revs) < int(info.State.Msgs) {
		m, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		meta, _ := m.Metadata()
		token, err := fence.HeaderToken(m.Headers())
		if err != nil || string(m.Data()) != fmt.Sprint(token) {
			t.Fatalf("sequence %d: %q (%v)", meta.Sequence.Stream, m.Data(), err)
		}
		revs = append(revs, meta.Sequence.Stream)
		tokens[meta.Sequence.Stream] = token
	}
	checkHistory(t, writes, revs, tokens)
}
