package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
)

// TestCommandCheckPassesFailsAndKills runs health commands: exit 0 passes;
// a failure names its status and its last line of output; a command that
// forks and hangs is killed, with what it started, when its time is up.
func TestCommandCheckPassesFailsAndKills(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := append(os.Environ(), "KVELECT_TOKEN=7")
	if err := commandCheck(`test "$KVELECT_TOKEN" = 7`, env)(ctx); err != nil {
		t.Errorf("a health command that exits 0: %v, want nil", err)
	}
	err := commandCheck(`echo connecting; echo "db: connection refused" >&2; exit 3`, env)(ctx)
	if err == nil || !strings.Contains(err.Error(), "exited 3: db: connection refused") {
		t.Errorf("a health command that exits 3: %v, want its status and last line", err)
	}

	mark := testenv.NewMark()
	hangs := testenv.WithMark(`sleep MARK & sleep MARK; true`, mark)
	checkCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = commandCheck(hangs, env)(checkCtx)
	if err == nil || !strings.Contains(err.Error(), "did not finish in time and was killed") {
		t.Errorf("a health command that hangs: %v, want it killed", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the hanging health command's check took %v, want about its 300ms", took)
	}
	testenv.Eventually(t, "the hanging health command's processes to be gone", 5*time.Second, func() bool {
		return len(testenv.Marked(mark)) == 0
	})
}

// TestURLCheckPassesAndFails GETs health URLs: 2xx passes; another status
// is named with the body's first line; the URL's credentials never show.
func TestURLCheckPassesAndFails(t *testing.T) {
	t.Parallel()
	status := http.StatusOK
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		fmt.Fprintln(w, "database: down\nsecond line")
	}))
	defer app.Close()
	withSecret := strings.Replace(app.URL, "http://", "http://user:s3cret@", 1) + "/healthz"
	check := urlCheck(app.Client(), withSecret)
	ctx := context.Background()
	if err := check(ctx); err != nil {
		t.Errorf("a health URL answering 200: %v, want nil", err)
	}
	status = http.StatusServiceUnavailable
	err := check(ctx)
	if err == nil || !strings.Contains(err.Error(), "503 Service Unavailable: database: down") || strings.Contains(err.Error(), "second line") {
		t.Errorf("a health URL answering 503: %v, want the status and the body's first line", err)
	}
	app.Close()
	err = check(ctx)
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "REDACTED@") {
		t.Errorf("a health URL that refuses connections: %v, want an error without the password", err)
	}
}

// TestHealthFlagsRejectBadInput checks that each bad combination of the
// health flags is named.
func TestHealthFlagsRejectBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--health-cmd", "true", "--health-url", "http://localhost/"}, "give one health check, not both"},
		{[]string{"--health-interval", "1s"}, "are for --health-cmd or --health-url"},
		{[]string{"--health-failures", "2"}, "are for --health-cmd or --health-url"},
		{[]string{"--health-cmd", "true", "--health-interval", "1ms"}, "--health-interval 1ms: want at least 10ms"},
		{[]string{"--health-cmd", "true", "--health-failures", "0"}, "--health-failures 0: want 1 or more"},
		{[]string{"--health-url", "localhost:8080/healthz"}, "want an http:// or https:// URL"},
		{[]string{"--health-url", "ftp://u:secret@host/"}, `"ftp://REDACTED@host/"`},
	} {
		fs := newFlagSet("election test", "")
		var h healthFlags
		h.add(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := h.check()
		if err == nil || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.says)
		}
	}
	fs := newFlagSet("election test", "")
	var h healthFlags
	h.add(fs)
	if err := fs.Parse([]string{"--health-url", "https://app:8443/healthz", "--health-failures", "5"}); err != nil {
		t.Fatal(err)
	}
	if err := h.check(); err != nil || len(h.options()) != 1 {
		t.Errorf("a good --health-url: %v, %d options, want nil and one", err, len(h.options()))
	}
}
