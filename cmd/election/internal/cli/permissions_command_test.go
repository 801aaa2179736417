package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/history"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

func TestPermissionsPrintsEachRole(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := runCLI(t, "permissions", "--role", "candidate", "--bucket", "JOBS")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, says := range []string{"permissions {\n", `"$JS.API.STREAM.INFO.KV_JOBS"`, `"$KV.JOBS.>"`, `deny: ["$KV.JOBS._kvelect.request.>"]`, `allow: ["_INBOX.>"]`} {
		if !strings.Contains(stdout, says) {
			t.Errorf("candidate's block does not say %s:\n%s", says, stdout)
		}
	}
	code, stdout, _ = runCLI(t, "permissions", "--role", "admin", "--format", "nsc", "--js-domain", "hub", "--inbox-prefix", "_INBOX_ops")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, says := range []string{"nsc edit user --name USER", `--allow-pub '$JS.hub.API.STREAM.CREATE.KV_ELECTIONS'`, `--allow-sub '_INBOX_ops.>'`} {
		if !strings.Contains(stdout, says) {
			t.Errorf("admin's nsc flags do not say %s:\n%s", says, stdout)
		}
	}

	for says, args := range map[string][]string{
		"--role is required": {},
		`--role "leader": want candidate, observer or admin`: {"--role", "leader"},
		`--format "yaml": want server or nsc`:                {"--role", "admin", "--format", "yaml"},
		`--js-domain "a.b"`:                                  {"--role", "admin", "--js-domain", "a.b"},
		"allowed: letters, digits":                           {"--role", "admin", "--bucket", "a.b"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"permissions"}, args...)...)
		e2e.WantOneLineError(t, code, ExitUsage, stdout, stderr, says)
	}
}

// roleUser is the user of the role tests: it holds exactly a role's
// permissions. root, the tests' own user, may do anything.
const (
	roleUser     = "app"
	rootPassword = "root"
)

// roleServer starts a server whose user roleUser holds exactly the
// permissions block, read by the server's own configuration parser, and
// returns the URLs of roleUser and of root.
func roleServer(t *testing.T, block string) (user, root string) {
	t.Helper()
	conf := fmt.Sprintf("authorization {\n  users = [\n    {user: %s, password: %q\n%s}\n    {user: root, password: %q}\n  ]\n}\n",
		roleUser, secret, block, rootPassword)
	file := filepath.Join(t.TempDir(), "server.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	parsed, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("the printed block does not parse:\n%s\n%v", conf, err)
	}
	s := testenv.ConfiguredServer(t, func(o *server.Options) { o.Users = parsed.Users })
	hostPort := strings.TrimPrefix(s.ClientURL(), "nats://")
	return "nats://" + hostPort, "nats://root:" + rootPassword + "@" + hostPort
}

// asUser runs the command args as roleUser.
func asUser(url string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	all := append(append([]string{}, args...), "-s", url, "--user", roleUser, "--password", secret)
	if i := slices.Index(args, "--"); i >= 0 { // run's COMMAND goes last
		all = append(append(append([]string{}, args[:i]...), "-s", url, "--user", roleUser, "--password", secret), args[i:]...)
	}
	code = Main(all, &out, &errOut)
	return code, out.String(), errOut.String()
}

// expect runs args as roleUser and says how the outcome differs from the
// exit code and output wanted.
func expect(url string, wantCode int, says string, args ...string) error {
	code, stdout, stderr := asUser(url, args...)
	if code != wantCode || !strings.Contains(stdout+stderr, says) {
		return fmt.Errorf("election %s: exit %d, want %d saying %q:\n%s%s", strings.Join(args, " "), code, wantCode, says, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, secret) {
		return fmt.Errorf("election %s printed the password", strings.Join(args, " "))
	}
	return nil
}

// roleExercises does what each role is for, and one thing each is not
// for, as roleUser on a server whose bucket ELECTIONS root created (but for
// admin, which creates it). It returns the first difference from what the
// role allows.
var roleExercises = map[string]func(t *testing.T, user, root string) error{
	roleCandidate: func(t *testing.T, user, root string) error {
		js := rootBucket(t, root)
		bulk(t, js)
		return firstError(
			func() error { return expect(user, ExitOK, "", "run", "--key", "job", "--once", "--", "true") },
			func() error { return watchersLeft(js, 0) },
			func() error { return expect(user, ExitSkipped, "", "run", "--key", "job", "--once", "--", "true") },
			func() error {
				waitLeader(t, candidates(t, root, "ELECTIONS", "other", "a", "b")) // resign asks only when another candidate could lead
				return expect(user, ExitError, `permission denied: publish to "$KV.ELECTIONS._kvelect.request.other"`, "resign", "--key", "other", "--timeout", "1s")
			},
		)
	},
	roleObserver: func(t *testing.T, user, root string) error {
		js := rootBucket(t, root)
		bulk(t, js)
		leader := waitLeader(t, candidates(t, root, "ELECTIONS", "job", "a"))
		return firstError(
			func() error { return expect(user, ExitOK, leader, "status", "--key", "job") },
			func() error { return watchersLeft(js, 1) }, // the candidate's
			func() error {
				return expect(user, ExitError, `permission denied: publish to "$KV.ELECTIONS.`, "run", "--key", "other", "--once", "--", "true")
			},
		)
	},
	roleAdmin: func(t *testing.T, user, root string) error {
		if err := expect(user, ExitOK, "created bucket ELECTIONS", "bucket", "create", "--ttl", "2s"); err != nil {
			return err
		}
		_, js := testenv.Connect(t, root)
		bulk(t, js)
		first := waitLeader(t, candidates(t, root, "ELECTIONS", "job", "a", "b"))
		return firstError(
			func() error { return expect(user, ExitOK, "usable for elections", "bucket", "check") },
			func() error { return expect(user, ExitOK, "leads job", "resign", "--key", "job") },
			func() error { return watchersLeft(js, 2) }, // the candidates'
			func() error {
				return expect(user, ExitOK, first+" leads job", "transfer", "--key", "job", "--to", first)
			},
			func() error {
				return expect(user, ExitError, `permission denied: publish to "$KV.ELECTIONS.`, "run", "--key", "other", "--once", "--", "true")
			},
		)
	},
}

// firstError runs steps until one fails, and returns its error.
func firstError(steps ...func() error) error {
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// bulk writes enough to the bucket that the server asks a watcher reading
// it for flow control.
func bulk(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	value := bytes.Repeat([]byte("x"), 900_000)
	for i := range 4 {
		if _, err := js.Publish(context.Background(), fmt.Sprintf("$KV.ELECTIONS.bulk%d", i), value); err != nil {
			t.Fatal(err)
		}
	}
}

// watchersLeft says whether the commands left n watchers on the bucket: a
// command removes its own when it ends.
func watchersLeft(js jetstream.JetStream, n int) error {
	got, err := countWatchers(context.Background(), js, "ELECTIONS")
	if err != nil || got != n {
		return fmt.Errorf("%d watchers on the bucket (%v), want %d", got, err, n)
	}
	return nil
}

// rootBucket creates the bucket ELECTIONS as root.
func rootBucket(t *testing.T, root string) jetstream.JetStream {
	t.Helper()
	_, js := testenv.Connect(t, root)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ELECTIONS", TTL: 2 * time.Second})
	return js
}

// TestEachRoleWorksWithExactlyItsPermissions gives a user exactly the block
// election permissions prints for each role, and checks the role's commands
// work and one outside it fails with a clear error; then, for each line of
// the block in turn, that the role's commands fail without it.
func TestEachRoleWorksWithExactlyItsPermissions(t *testing.T) {
	t.Parallel()
	requireExactly(t, false, roleExercises, func(role string, p permissionSet) []droppedPermission { return droppingEach(p) })
}

// requireExactly runs, for each role, exercise with exactly the block
// election permissions prints (with --history=false unless history is set), then
// with each block that drop makes from the role's permissions: each must
// fail. The subtests mostly wait for timeouts, so they run in parallel; the
// environment runCLI relies on is isolated for the whole run (TestMain).
func requireExactly(t *testing.T, history bool, exercises map[string]func(t *testing.T, user, root string) error,
	drop func(role string, p permissionSet) []droppedPermission) {
	printed := map[string]string{}
	for _, role := range []string{roleCandidate, roleObserver, roleAdmin} {
		args := []string{"permissions", "--role", role}
		if !history {
			args = append(args, "--history=false")
		}
		code, block, stderr := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		printed[role] = block
	}
	for role, block := range printed {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			user, root := roleServer(t, block)
			if err := exercises[role](t, user, root); err != nil {
				t.Fatal(err)
			}
		})
		perms, err := rolePermissions(role, defaultBucket, "", "", history)
		if err != nil {
			t.Fatal(err)
		}
		for _, dropped := range drop(role, perms) {
			t.Run(role+" without "+dropped.what, func(t *testing.T) {
				t.Parallel()
				user, root := roleServer(t, dropped.perms.serverBlock())
				if err := exercises[role](t, user, root); err == nil {
					t.Errorf("the %s role works without %s: it is not needed", role, dropped.what)
				} else {
					t.Logf("as expected: %v", err)
				}
			})
		}
	}
}

// TestACandidateDeniedItsWritesExitsAtOnce runs election run, sidecar and
// agent as a user who may watch but not campaign, on buckets at TTL 2 s
// and 15 s (where a write's own timeout, min(interval, 5 s), is 5 s): each
// exits non-zero within 5 s of its start with the denied subject and the
// command that grants it, logged as JSON, never the client's raw error or
// the password; the sidecar's /healthz is never ok meanwhile.
func TestACandidateDeniedItsWritesExitsAtOnce(t *testing.T) {
	t.Parallel()
	bin := e2e.BuildElection(t)
	perms, err := rolePermissions(roleObserver, "E2E", "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{2 * time.Second, 15 * time.Second} {
		user, root := roleServer(t, perms.serverBlock())
		_, js := testenv.Connect(t, root)
		testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "E2E", TTL: ttl})
		conn := []string{"--server", user, "--user", roleUser, "--password", secret, "--bucket", "E2E", "--log-format", "json"}
		for _, c := range []struct {
			name string
			args []string
		}{
			{"run", append(append([]string{"run", "--name", "denied"}, conn...), "--key", "job", "--", "true")},
			{"sidecar", append(append([]string{"sidecar", "--name", "denied"}, conn...), "--key", "job", "--listen", "127.0.0.1:0")},
			{"agent", append(append([]string{"agent", "--name", "denied"}, conn...), "--daemon", "d=true")},
		} {
			t.Run(fmt.Sprintf("%s at TTL %v", c.name, ttl), func(t *testing.T) {
				started := time.Now()
				d := e2e.StartProcess(t, bin, c.name, c.args...)
				var healthOK atomic.Bool
				if c.name == "sidecar" {
					stopPolling := pollHealth(t, d, &healthOK)
					defer stopPolling()
				}
				select {
				case <-d.Done():
				case <-time.After(5 * time.Second):
					t.Fatalf("%s still runs 5 s after it started:\n%s", c.name, d.Logged(t))
				}
				t.Logf("%s at TTL %v exited %d after %v", c.name, ttl, d.ExitCode(), time.Since(started).Round(time.Millisecond))
				log := d.Logged(t)
				if d.ExitCode() == ExitOK {
					t.Errorf("%s exited 0 after %v, want an error:\n%s", c.name, time.Since(started), log)
				}
				if !strings.Contains(log, `permission denied: publish to "$KV.E2E.`) || !strings.Contains(log, "election permissions --role candidate --bucket E2E") {
					t.Errorf("%s: the log does not name the denied subject and the grant:\n%s", c.name, log)
				}
				if strings.Contains(log, "nats: permissions violation") || strings.Contains(log, secret) {
					t.Errorf("%s: the log holds the client's raw error or the password:\n%s", c.name, log)
				}
				if healthOK.Load() {
					t.Errorf("%s: /healthz answered ok for a candidate that cannot write", c.name)
				}
			})
		}
	}
}

// pollHealth polls the /healthz of sidecar d, once its log gives the
// address, until the returned function is called, and records whether any
// answer was ok.
func pollHealth(t *testing.T, d *e2e.Process, ok *atomic.Bool) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		addr := regexp.MustCompile(`"url":"(http://[^"]+/)"`)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			data, err := os.ReadFile(d.Log)
			if err != nil {
				continue
			}
			m := addr.FindSubmatch(data)
			if m == nil {
				continue
			}
			resp, err := http.Get(string(m[1]) + "healthz")
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok.Store(true)
			}
		}
	}()
	return func() { close(done); <-finished }
}

type droppedPermission struct {
	what  string
	perms permissionSet
}

// droppingEach returns p less each of its permissions in turn.
func droppingEach(p permissionSet) []droppedPermission {
	var out []droppedPermission
	for _, list := range []struct {
		name string
		get  func(*permissionSet) *[]string
	}{
		{"publish allow", func(p *permissionSet) *[]string { return &p.pubAllow }},
		{"publish deny", func(p *permissionSet) *[]string { return &p.pubDeny }},
		{"subscribe allow", func(p *permissionSet) *[]string { return &p.subAllow }},
	} {
		for i, subject := range *list.get(&p) {
			q := permissionSet{pubAllow: slices.Clone(p.pubAllow), pubDeny: slices.Clone(p.pubDeny), subAllow: slices.Clone(p.subAllow)}
			l := list.get(&q)
			*l = slices.Delete(*l, i, i+1)
			if len(*l) == 0 {
				*l = []string{"nothing.matches.this"} // an empty allow list allows everything
			}
			out = append(out, droppedPermission{list.name + " " + subject, q})
		}
	}
	return out
}

// historyExercises do, as roleUser, what each role does with the bucket's
// leadership history.
var historyExercises = map[string]func(t *testing.T, user, root string) error{
	roleCandidate: func(t *testing.T, user, root string) error {
		js := rootBucket(t, root)
		if _, err := history.Create(context.Background(), js, "ELECTIONS", 0); err != nil {
			t.Fatal(err)
		}
		// Without the history's permissions run still runs, with one
		// warning: the history holds the win only with them.
		if err := expect(user, ExitOK, "", "run", "--key", "job", "--once", "--", "true"); err != nil {
			return err
		}
		return recorded(js, "job")
	},
	roleObserver: func(t *testing.T, user, root string) error {
		js := rootBucket(t, root)
		if _, err := history.Create(context.Background(), js, "ELECTIONS", 0); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if code := Main([]string{"run", "-s", root, "--key", "job", "--once", "--", "true"}, &out, &errOut); code != 0 {
			t.Fatalf("run as root: exit %d: %s", code, errOut.String())
		}
		return firstError(
			func() error { return expect(user, ExitOK, "won", "history") },
			func() error { // the command removes the consumer it read with
				stream, err := js.Stream(context.Background(), "KVELECT_HISTORY_ELECTIONS")
				if err != nil {
					t.Fatal(err)
				}
				if n := stream.CachedInfo().State.Consumers; n != 0 {
					return fmt.Errorf("%d consumers left on the history stream after election history, want 0", n)
				}
				return nil
			},
		)
	},
	roleAdmin: func(t *testing.T, user, root string) error {
		return firstError(
			func() error {
				return expect(user, ExitOK, "history of bucket ELECTIONS", "bucket", "create", "--history", "7d")
			},
			// Asked again with another retention, it opens the one there.
			func() error { return expect(user, ExitOK, "kept 7d", "bucket", "create", "--history", "30d") },
		)
	},
}

// recorded says whether the history of ELECTIONS holds a win of key.
func recorded(js jetstream.JetStream, key string) error {
	h, err := history.Open(context.Background(), js, "ELECTIONS")
	if err != nil {
		return err
	}
	events, err := h.Events(context.Background(), key, time.Time{})
	if err != nil {
		return err
	}
	for _, ev := range events {
		if ev.Kind == history.Won {
			return nil
		}
	}
	return fmt.Errorf("the history holds no win of %s: %v", key, events)
}

// TestEachRoleUsesTheHistoryWithItsHistoryPermissions gives a user the block
// election permissions --history prints for each role, runs what the role
// does with the history, then drops each of the history's lines in turn.
func TestEachRoleUsesTheHistoryWithItsHistoryPermissions(t *testing.T) {
	t.Parallel()
	requireExactly(t, true, historyExercises, func(role string, p permissionSet) []droppedPermission {
		var out []droppedPermission
		for _, subject := range historyPermissions(role, defaultBucket, "") {
			q := p
			q.pubAllow = slices.DeleteFunc(slices.Clone(p.pubAllow), func(s string) bool { return s == subject })
			out = append(out, droppedPermission{"publish allow " + subject, q})
		}
		return out
	})
}
