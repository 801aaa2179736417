package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestResignAndTransferMoveLeadership runs three candidates and moves their
// leadership with resign, then with transfer.
func TestResignAndTransferMoveLeadership(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	elections := candidates(t, url, "E", "job", "node0", "node1", "node2")
	first := waitLeader(t, elections)

	code, stdout, stderr := runCLI(t, "resign", "-s", url, "--bucket", "E", "--key", "job")
	if code != 0 || stderr != "" {
		t.Fatalf("resign: exit %d, stderr %q", code, stderr)
	}
	second := wantNewLeader(t, stdout, elections, first)

	var to string
	for name := range elections {
		if name != first && name != second {
			to = name
		}
	}
	code, stdout, stderr = runCLI(t, "transfer", "-s", url, "--bucket", "E", "--key", "job", "--to", to)
	if code != 0 || stderr != "" {
		t.Fatalf("transfer to %s: exit %d, stderr %q", to, code, stderr)
	}
	if third := wantNewLeader(t, stdout, elections, second); third != to {
		t.Errorf("transfer to %s: %s leads", to, third)
	}

	// Nobody named ghost campaigns: the transfer is refused, and the leader
	// keeps the key.
	token := elections[to].Token()
	code, stdout, stderr = runCLI(t, "transfer", "-s", url, "--bucket", "E", "--key", "job", "--to", "ghost")
	e2e.WantOneLineError(t, code, ExitError, stdout, stderr, "election transfer: ", strings.TrimPrefix(election.ErrNotCandidate.Error(), "election: "),
		`"ghost" does not campaign for key "job"`, "its candidates: node0, node1, node2")
	if now := elections[to].Token(); now != token {
		t.Errorf("after a refused transfer %s leads with token %d, want %d still", to, now, token)
	}
}

// wantNewLeader checks that stdout names a leader of job other than old,
// that this candidate comes to lead, and returns its name.
func wantNewLeader(t *testing.T, stdout string, elections map[string]*election.Election, old string) string {
	t.Helper()
	var name, key string
	var revision uint64
	if _, err := fmt.Sscanf(stdout, "%s leads %s (revision %d)\n", &name, &key, &revision); err != nil || key != "job" || revision == 0 {
		t.Fatalf("printed %q (%v), want NAME leads job (revision N)", stdout, err)
	}
	if name == old || elections[name] == nil {
		t.Fatalf("printed %q: want another candidate than %s", stdout, old)
	}
	if leader := waitLeader(t, elections); leader != name {
		t.Fatalf("printed %q, but %s leads", stdout, leader)
	}
	return name
}

// TestResignWithALoneCandidateFails resigns the only candidate: resign
// fails within a second, without asking it, and it keeps leading.
func TestResignWithALoneCandidateFails(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E", TTL: 2 * time.Second})
	elections := candidates(t, url, "E", "job", "lone")
	waitLeader(t, elections)
	token := elections["lone"].Token()

	began := time.Now()
	code, stdout, stderr := runCLI(t, "resign", "-s", url, "--bucket", "E", "--key", "job")
	e2e.WantOneLineError(t, code, ExitError, stdout, stderr, strings.TrimPrefix(election.ErrNotTransferred.Error(), "election: "),
		`no candidate but lone campaigns for key "job" of bucket "E", so lone keeps leading; start another candidate first`)
	if took := time.Since(began); took > time.Second {
		t.Errorf("resign took %v to fail, want under a second", took)
	}
	if !elections["lone"].IsLeader() || elections["lone"].Token() != token {
		t.Errorf("after the failed resign: leader %v, token %d; want lone leading with token %d still", elections["lone"].IsLeader(), elections["lone"].Token(), token)
	}

	code, stdout, stderr = runCLI(t, "transfer", "-s", url, "--bucket", "E", "--key", "free", "--to", "lone")
	e2e.WantOneLineError(t, code, ExitError, stdout, stderr, strings.TrimPrefix(election.ErrNoLeader.Error(), "election: "), `key "free" of bucket "E"`)
}

func TestHandoverErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	for name, tc := range map[string]struct {
		args []string
		code int
		says []string
	}{
		"resign without key":   {[]string{"resign", "-s", url}, 2, []string{"--key is required"}},
		"transfer without key": {[]string{"transfer", "-s", url, "--to", "x"}, 2, []string{"--key is required"}},
		"transfer without to":  {[]string{"transfer", "-s", url, "--key", "k"}, 2, []string{"--to is required"}},
		"invalid to":           {[]string{"transfer", "-s", url, "--key", "k", "--to", "released:x"}, 2, []string{`invalid argument: candidate name "released:x"`}},
		"invalid key":          {[]string{"resign", "-s", url, "--key", "a b"}, 2, []string{`invalid argument: key "a b"`}},
		"zero timeout":         {[]string{"resign", "-s", url, "--key", "k", "--timeout", "0s"}, 2, []string{"--timeout 0s: want a duration above 0"}},
		"resign has no to":     {[]string{"resign", "-s", url, "--key", "k", "--to", "x"}, 2, []string{"flag provided but not defined: -to"}},
		"extra argument":       {[]string{"resign", "-s", url, "--key", "k", "x"}, 2, []string{`unexpected argument "x"`}},
		"missing bucket":       {[]string{"resign", "-s", url, "--key", "k", "--bucket", "NOPE"}, 1, []string{`bucket "NOPE" does not exist`}},
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.args...)
			e2e.WantOneLineError(t, code, tc.code, stdout, stderr, tc.says...)
		})
	}
}
