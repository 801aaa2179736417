package kvcheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }

const ttl = time.Second

// at builds an op from call to ret, in milliseconds.
func at(client, key string, kind Kind, call, ret int64, outcome Outcome, rev uint64, expected uint64) Op {
	return Op{Client: client, Key: key, Kind: kind, Call: call * 1e6, Return: ret * 1e6, Outcome: outcome, Rev: rev, Expected: expected}
}

// TestCheckJudgesHandWrittenHistories runs the check on small histories
// whose verdict is known.
func TestCheckJudgesHandWrittenHistories(t *testing.T) {
	tests := []struct {
		name  string
		ops   []Op
		want  string
		order bool // a revision-order problem is expected
	}{
		{"a claim, renewals and a lost claim", []Op{
			at("a", "k", Create, 0, 1, OK, 5, 0),
			at("b", "k", Create, 2, 3, Conflict, 0, 0),
			at("a", "k", Update, 4, 5, OK, 9, 5),
			at("b", "k", Update, 6, 7, Conflict, 0, 5),
		}, "true", false},
		{"two claims of one key both won", []Op{
			at("a", "k", Create, 0, 1, OK, 5, 0),
			at("b", "k", Create, 2, 3, OK, 6, 0),
		}, "false", false},
		{"a claim won after the holder's write aged out", []Op{
			at("a", "k", Create, 0, 1, OK, 5, 0),
			at("b", "k", Create, 1001, 1002, OK, 6, 0),
		}, "true", false},
		{"a claim won before the holder's write can have aged out", []Op{
			at("a", "k", Create, 0, 1, OK, 5, 0),
			at("b", "k", Create, 500, 990, OK, 6, 0),
		}, "false", false},
		{"a renewal over a revision that was replaced", []Op{
			at("a", "k", Create, 0, 1, OK, 5, 0),
			at("b", "k", Put, 2, 3, OK, 6, 0),
			at("a", "k", Update, 4, 5, OK, 7, 5),
		}, "false", false},
		{"a claim over a delete marker", []Op{
			at("a", "k", Create, 0, 1, OK, 5, 0),
			at("x", "k", Delete, 2, 3, OK, 0, 0),
			at("b", "k", Create, 4, 5, OK, 7, 0),
			at("a", "k", Update, 6, 7, Conflict, 0, 5),
		}, "true", false},
		{"a claim over no entry once a delete marker aged out", []Op{
			at("a", "k", Create, 0, 1, OK, 5, 0),
			at("x", "k", Delete, 2, 3, OK, 0, 0),
			at("b", "k", Update, 1010, 1011, OK, 9, 0),
		}, "true", false},
		{"a claim over no entry while a delete marker is live", []Op{
			at("a", "k", Create, 0, 1, OK, 5, 0),
			at("x", "k", Delete, 2, 3, OK, 0, 0),
			at("b", "k", Update, 500, 501, OK, 9, 0),
		}, "false", false},
		{"a timed-out claim that took effect later", []Op{
			at("a", "k", Create, 0, 0, Unknown, 0, 0),
			at("b", "k", Create, 10, 11, Conflict, 0, 0),
		}, "true", false},
		{"a claim over no entry once the holder's write aged out", []Op{
			at("a", "k", Update, 0, 1, OK, 5, 0),
			at("a", "k", Update, 2, 3, OK, 6, 5),
			at("b", "k", Update, 1010, 1011, OK, 9, 0),
		}, "true", false},
		{"a claim over no entry while the holder's write is live", []Op{
			at("a", "k", Update, 0, 1, OK, 5, 0),
			at("a", "k", Update, 2, 3, OK, 6, 5),
			at("b", "k", Update, 500, 501, OK, 9, 0),
		}, "false", false},
		{"a release of unrecorded condition, refused", []Op{
			at("a", "k", Update, 0, 1, OK, 5, 0),
			{Client: "a", Key: "k", Kind: Delete, Call: 2e6, Return: 3e6, Outcome: Conflict, Unrecorded: true},
		}, "true", false},
		{"a refused claim with nothing there", []Op{
			at("b", "k", Create, 10, 11, Conflict, 0, 0),
		}, "false", false},
		{"a revision given twice, on two keys", []Op{
			at("a", "k", Create, 0, 1, OK, 5, 0),
			at("b", "j", Create, 2, 3, OK, 5, 0),
		}, "true", true},
		{"a revision lower than one returned before", []Op{
			at("a", "k", Create, 0, 1, OK, 8, 0),
			at("b", "j", Create, 2, 3, OK, 6, 0),
		}, "true", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(tt.ops, ttl, time.Minute)
			if r.Linearizable != tt.want {
				t.Errorf("linearizable %s, want %s: %s", r.Linearizable, tt.want, r.Summary())
			}
			if tt.want == "false" && (len(r.Illegal) != 1 || r.Illegal[0] != "k") {
				t.Errorf("illegal keys %v, want [k]", r.Illegal)
			}
			if got := len(r.Order) > 0; got != tt.order {
				t.Errorf("revision-order problems %v, want some: %v", r.Order, tt.order)
			}
		})
	}
}

// store is an in-memory KV store that keeps the model's contract, or, with
// broken, lets a Create win over a live value: a store that breaks
// compare-and-set.
type store struct {
	broken bool
	clock  atomic.Int64

	mu   sync.Mutex
	rev  uint64
	keys map[string]uint64 // the live value's revision per key
}

var errConflict = errors.New("conflict")

func (s *store) create(key string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, live := s.keys[key]; live && !s.broken {
		return 0, errConflict
	}
	s.rev++
	s.keys[key] = s.rev
	return s.rev, nil
}

func (s *store) update(key string, expected uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[key] != expected {
		return 0, errConflict
	}
	s.rev++
	s.keys[key] = s.rev
	return s.rev, nil
}

func (s *store) delete(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev++
	delete(s.keys, key)
}

// campaign runs clients that claim, renew and release keys as elections
// do, on s, and returns what they recorded.
func campaign(s *store, clients, rounds int) []Op {
	var mu sync.Mutex
	var ops []Op
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("c%d", c)
			held := map[string]uint64{}
			for range rounds {
				key := fmt.Sprintf("k%d", rand.N(3))
				op := Op{Client: name, Key: key, Call: s.clock.Add(1)}
				var err error
				switch expected, ok := held[key]; {
				case !ok:
					op.Kind = Create
					op.Rev, err = s.create(key)
				case rand.N(4) == 0:
					op.Kind = Delete
					s.delete(key)
				default:
					op.Kind, op.Expected = Update, expected
					op.Rev, err = s.update(key, expected)
				}
				op.Return = s.clock.Add(1)
				switch {
				case err != nil:
					op.Outcome = Conflict
					delete(held, key)
				case op.Kind == Delete:
					op.Outcome = OK
					delete(held, key)
				default:
					op.Outcome = OK
					held[key] = op.Rev
				}
				mu.Lock()
				ops = append(ops, op)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ops
}

// TestCheckFailsOnAStoreThatBreaksCompareAndSet records clients campaigning
// on an in-memory store: its history is linearizable, and that of the same
// store letting a Create win over a live value is not.
func TestCheckFailsOnAStoreThatBreaksCompareAndSet(t *testing.T) {
	good := campaign(&store{keys: map[string]uint64{}}, 4, 200)
	if r := Check(good, time.Hour, time.Minute); r.Linearizable != "true" || len(r.Order) > 0 {
		t.Errorf("a correct store: %s, want linearizable and no order problems", r.Summary())
	}
	bad := campaign(&store{keys: map[string]uint64{}, broken: true}, 4, 200)
	r := Check(bad, time.Hour, time.Minute)
	if r.Linearizable != "false" || len(r.Illegal) == 0 {
		t.Fatalf("a store that lets a Create win over a value: %s, want not linearizable", r.Summary())
	}
	page := filepath.Join(t.TempDir(), "kv.html")
	if err := r.Visualize(page, []Window{{Name: "a fault", Start: bad[0].Call, End: bad[10].Return}}); err != nil {
		t.Fatal(err)
	}
	if html, _ := os.ReadFile(page); !strings.Contains(string(html), "a fault") {
		t.Errorf("the visualization does not mark the fault window")
	}
}

// TestCheckPassesARealServersHistory records clients campaigning on keys
// of a real bucket with a short TTL, with calls that time out and pauses
// that let values age out: the history must be linearizable, with every
// revision in order, both as recorded and once resolved against the
// stream's record of its writes (republished as they are stored).
func TestCheckPassesARealServersHistory(t *testing.T) {
	s := testenv.Server(t)
	nc, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "KVCHECK", TTL: ttl,
		RePublish: &jetstream.RePublish{Source: ">", Destination: "record.>"}})
	var stream Stream
	var streamMu sync.Mutex
	sub, err := nc.Subscribe("record.>", func(m *nats.Msg) {
		rev, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		e := Entry{Rev: rev, Key: strings.TrimPrefix(m.Subject, "record.$KV.KVCHECK."), Kind: Put, Value: string(m.Data)}
		if expected, ok := m.Header[jetstream.ExpectedLastSubjSeqHeader]; ok {
			e.Conditional = true
			e.Expected, _ = strconv.ParseUint(expected[0], 10, 64)
		}
		switch m.Header.Get("KV-Operation") {
		case "DEL":
			e.Kind = Delete
		case "PURGE":
			e.Kind = Purge
		}
		streamMu.Lock()
		stream.Entries = append(stream.Entries, e)
		streamMu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	origin := time.Now()
	now := func() int64 { return int64(time.Since(origin)) } // monotonic: one process records every call
	var mu sync.Mutex
	var ops []Op
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("c%d", c)
			held := map[string]uint64{}
			for i := range 60 {
				key := fmt.Sprintf("k%d", rand.N(2))
				if i%20 == 19 {
					time.Sleep(ttl + 100*time.Millisecond) // let what this client wrote age out
				}
				timeout := time.Second
				if rand.N(10) == 0 {
					timeout = 50 * time.Microsecond // may be sent and applied, but times out
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				op := Op{Client: name, Key: key, Call: now()}
				var err error
				expected, holds := held[key]
				switch {
				case !holds:
					op.Kind = Create
					op.Rev, err = kv.Create(ctx, key, []byte(name))
					op.Value = name
				case rand.N(4) == 0:
					op.Kind, op.Expected = Delete, expected
					err = kv.Delete(ctx, key, jetstream.LastRevision(expected))
				default:
					op.Kind, op.Expected = Update, expected
					op.Rev, err = kv.Update(ctx, key, []byte(name), expected)
					op.Value = name
				}
				op.Return = now()
				cancel()
				delete(held, key)
				switch {
				case err == nil:
					op.Outcome = OK
					if op.Kind != Delete {
						held[key] = op.Rev
					}
				case errors.Is(err, jetstream.ErrKeyExists) || strings.Contains(err.Error(), "wrong last sequence"):
					op.Outcome = Conflict
				default:
					op.Outcome, op.Rev = Unknown, 0
				}
				mu.Lock()
				ops = append(ops, op)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r := Check(ops, ttl, time.Minute)
	t.Log(r.Summary())
	if r.Linearizable != "true" || len(r.Order) > 0 {
		t.Errorf("a real server's history: %s, want linearizable and no order problems", r.Summary())
	}

	info, err := kv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stream.Last = info.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	if err := nc.Flush(); err != nil { // every republished entry has arrived
		t.Fatal(err)
	}
	sub.Unsubscribe()
	streamMu.Lock()
	resolved, settled := Resolve(ops, stream)
	streamMu.Unlock()
	r = Check(resolved, ttl, time.Minute)
	t.Logf("resolved %+v: %s", settled, r.Summary())
	if r.Linearizable != "true" || len(r.Order) > 0 {
		t.Errorf("the resolved history: %s, want linearizable and no order problems", r.Summary())
	}
	if settled.Gaps > 0 || len(settled.Unexplained) > 0 {
		t.Errorf("resolved %+v: a single server republishes every revision, each written by a recorded call; want no gaps and nothing unexplained", settled)
	}
	if settled.Unknown > 0 && settled.NotApplied+settled.Bounded == 0 {
		t.Errorf("resolved %+v: no call of unknown outcome settled or bounded", settled)
	}
}
