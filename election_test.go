package election_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

func TestNewElectionRejectsBadInput(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	ttl10s := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "TTL10S", TTL: 10 * time.Second})
	ttl1s := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "TTL1S", TTL: time.Second})
	ttl2h := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "TTL2H", TTL: 2 * time.Hour})
	noTTL := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "NOTTL"})

	tests := []struct {
		name   string
		member string
		key    string
		kv     jetstream.KeyValue
		opts   []election.Option
		want   error
		says   string // a fragment the message must carry
	}{
		{"empty name", "", "k", ttl10s, nil, election.ErrInvalidArgument, "must not be empty"},
		{"name that marks a release", "released:a", "k", ttl10s, nil, election.ErrInvalidArgument, `candidate name "released:a": allowed: letters, digits`},
		{"space in name", "svc a", "k", ttl10s, nil, election.ErrInvalidArgument, `candidate name "svc a": allowed: letters, digits and - / _ = .`},
		{"double dot in name", "a..b", "k", ttl10s, nil, election.ErrInvalidArgument, `candidate name "a..b"`},
		{"empty key", "m", "", ttl10s, nil, election.ErrInvalidArgument, "must not be empty"},
		{"space in key", "m", "a b", ttl10s, nil, election.ErrInvalidArgument, `"a b"`},
		{"wildcard key", "m", "a.*", ttl10s, nil, election.ErrInvalidArgument, "letters, digits"},
		{"leading dot", "m", ".a", ttl10s, nil, election.ErrInvalidArgument, `".a"`},
		{"double dot", "m", "a..b", ttl10s, nil, election.ErrInvalidArgument, `"a..b"`},
		{"reserved key", "m", "_kvelect.x", ttl10s, nil, election.ErrInvalidArgument, `starting with "_kvelect." are reserved`},
		{"name that marks work done", "done:a", "k", ttl10s, nil, election.ErrInvalidArgument, `candidate name "done:a"`},
		{"nil bucket", "m", "k", nil, nil, election.ErrInvalidArgument, "jetstream.KeyValue"},
		{"bucket without TTL", "m", "k", noTTL, nil, election.ErrBucketConfig, `"NOTTL"`},
		{"TTL below minimum", "m", "k", ttl1s, nil, election.ErrBucketConfig, "bucket TTL 1s, allowed 2s to 1h0m0s"},
		{"TTL above maximum", "m", "k", ttl2h, nil, election.ErrBucketConfig, "bucket TTL 2h0m0s, allowed 2s to 1h0m0s"},
		{"interval below minimum", "m", "k", ttl10s,
			[]election.Option{election.WithCampaignInterval(500 * time.Millisecond)},
			election.ErrInvalidArgument, "campaign interval 500ms is below the minimum 1s"},
		{"interval too close to TTL", "m", "k", ttl10s,
			[]election.Option{election.WithCampaignInterval(9800 * time.Millisecond)},
			election.ErrInvalidArgument, "campaign interval 9.8s at bucket TTL 10s: allowed at most 9.128s (300ms before a write can age out"},
		{"unsafe option still bounds the gap", "m", "k", ttl1s,
			[]election.Option{election.WithUnsafeShortTTL(), election.WithCampaignInterval(time.Second)},
			election.ErrInvalidArgument, "campaign interval 1s at bucket TTL 1s: allowed at most 894ms (10ms before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := election.NewElection(context.Background(), tt.member, tt.key, tt.kv, tt.opts...)
			if !errors.Is(err, tt.want) {
				t.Fatalf("NewElection: got (%v, %v), want error %v", e, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.says) {
				t.Errorf("error %q does not say %q", err, tt.says)
			}
		})
	}

	t.Run("unsafe option allows a short TTL", func(t *testing.T) {
		if _, err := election.NewElection(context.Background(), "m", "k", ttl1s, election.WithUnsafeShortTTL()); err != nil {
			t.Fatalf("NewElection with WithUnsafeShortTTL on a 1s bucket: %v", err)
		}
	})
}

func TestNewElectionReportsMissingBucketAndDeadServer(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	nc, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "GONE", TTL: 10 * time.Second})
	if err := js.DeleteKeyValue(context.Background(), "GONE"); err != nil {
		t.Fatal(err)
	}
	_, err := election.NewElection(context.Background(), "m", "k", kv)
	if !errors.Is(err, election.ErrBucketStatus) || !strings.Contains(err.Error(), `"GONE"`) {
		t.Fatalf("deleted bucket: got %v, want ErrBucketStatus naming the bucket", err)
	}

	nc.Close()
	_, err = election.NewElection(context.Background(), "m", "k", kv)
	if !errors.Is(err, election.ErrBucketStatus) {
		t.Fatalf("closed connection: got %v, want ErrBucketStatus", err)
	}
}

func TestStartOnceAndStopIdempotent(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ONCE", TTL: 10 * time.Second})

	stoppedEarly, err := election.NewElection(context.Background(), "m", "k", kv)
	if err != nil {
		t.Fatal(err)
	}
	stoppedEarly.Stop()
	if err := stoppedEarly.Start(context.Background()); !errors.Is(err, election.ErrStopped) {
		t.Fatalf("Start after Stop: got %v, want ErrStopped", err)
	}

	campaigned := make(chan struct{}, 1)
	e, err := election.NewElection(context.Background(), "m", "k", kv, election.WithoutSplay(), election.OnCampaign(func(election.State) {
		select {
		case campaigned <- struct{}{}:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.State(); got != election.UnknownState {
		t.Errorf("State before Start = %v, want unknown", got)
	}
	started := make(chan error, 1)
	go func() { started <- e.Start(context.Background()) }()
	<-campaigned
	if err := e.Start(context.Background()); !errors.Is(err, election.ErrAlreadyStarted) {
		t.Errorf("second Start: got %v, want ErrAlreadyStarted", err)
	}
	e.Stop()
	e.Stop()
	if err := <-started; err != nil {
		t.Errorf("Start returned %v after Stop, want nil", err)
	}
	if got := e.State(); got != election.UnknownState {
		t.Errorf("State after Stop = %v, want unknown", got)
	}
}

func TestStateString(t *testing.T) {
	t.Parallel()
	for s, want := range map[election.State]string{
		election.UnknownState:   "unknown",
		election.CandidateState: "candidate",
		election.LeaderState:    "leader",
		election.State(42):      "unknown",
	} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", s, got, want)
		}
	}
}

// TestCheckCandidateFollowsTheKeyRule checks that a candidate name is
// allowed exactly when it could be a key, and that a refusal names the
// allowed characters.
func TestCheckCandidateFollowsTheKeyRule(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "node-1", "host.example.com", "zone/a", "a=b", "A_9", "", "svc a", ".a", "a.", "a..b", "released:x", "handoff:x", "done:x", "a*", "a>", "é"} {
		err := election.CheckCandidate(name, "k")
		if (err == nil) != (election.CheckKey(name) == nil) {
			t.Errorf("name %q: CheckCandidate %v, CheckKey %v; want both to allow it or neither", name, err, election.CheckKey(name))
		}
		if err != nil && (!errors.Is(err, election.ErrInvalidArgument) || !strings.Contains(err.Error(), "allowed: letters, digits and - / _ = .")) {
			t.Errorf("name %q: %v; want ErrInvalidArgument and the allowed characters", name, err)
		}
	}
}

// TestAStandDownSaysWhyTheProgramStoppedTheElection cancels a leader's
// Start context with a cause of the program's own: the stand-down (OnLost,
// EventLost, so the history) and the leadership context's cause
// (context.Cause) match ErrStopped and name that cause; a plain cancel
// gives ErrStopped alone.
func TestAStandDownSaysWhyTheProgramStoppedTheElection(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "STOPCAUSE", TTL: 2 * time.Second})
	why := errors.New("moving to another node")
	for _, tc := range []struct {
		name   string
		cancel func(context.CancelCauseFunc)
		want   string
	}{
		{"a cause of its own", func(cancel context.CancelCauseFunc) { cancel(why) }, "election: stopped: moving to another node"},
		{"a plain cancel", func(cancel context.CancelCauseFunc) { cancel(nil) }, "election: stopped"},
	} {
		won, lost := make(chan context.Context, 1), make(chan error, 1)
		e, err := election.NewElection(context.Background(), "a", "svc", kv, election.WithoutSplay(),
			election.OnWon(func(ctx context.Context) { won <- ctx }), election.OnLost(func(cause error) { lost <- cause }))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Start(ctx) }()
		lead := <-won
		tc.cancel(cancel)
		if cause := <-lost; !errors.Is(cause, election.ErrStopped) || cause.Error() != tc.want {
			t.Errorf("%s: the stand-down's cause is %v, want ErrStopped saying %q", tc.name, cause, tc.want)
		}
		if cause := context.Cause(lead); !errors.Is(cause, election.ErrStopped) || cause.Error() != tc.want {
			t.Errorf("%s: the leadership context's cause is %v, want ErrStopped saying %q", tc.name, cause, tc.want)
		}
		if err := <-done; err != nil {
			t.Errorf("%s: Start returned %v, want nil", tc.name, err)
		}
	}
}

// TestTheLeadershipContextSaysWhyItEnded: a leader whose key another
// client deletes stands down, and its leadership context's cause
// (context.Cause) is the stand-down's, ErrRevisionGone, as OnLost's is.
func TestTheLeadershipContextSaysWhyItEnded(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	_, js := testenv.Connect(t, s.ClientURL())
	kv := testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "LEADCAUSE", TTL: 2 * time.Second})
	won, lost := make(chan context.Context, 1), make(chan error, 1)
	e, err := election.NewElection(context.Background(), "a", "svc", kv, election.WithoutSplay(),
		election.OnWon(func(ctx context.Context) { won <- ctx; <-ctx.Done() }),
		election.OnLost(func(cause error) { lost <- cause }))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Start(context.Background()) }()
	t.Cleanup(func() { e.Stop(); <-done })
	lead := <-won
	if err := kv.Delete(context.Background(), "svc"); err != nil {
		t.Fatal(err)
	}
	<-lead.Done()
	if cause := context.Cause(lead); !errors.Is(cause, election.ErrRevisionGone) {
		t.Errorf("the leadership context's cause is %v, want ErrRevisionGone", cause)
	}
	if cause := <-lost; !errors.Is(cause, election.ErrRevisionGone) {
		t.Errorf("OnLost's cause is %v, want ErrRevisionGone", cause)
	}
}
