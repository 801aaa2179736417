package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"time"
	"unicode/utf8"
)

// The app's health checks that gate leadership (election.WithHealthCheck):
// a shell command (--health-cmd, and an agent daemon's health command) or
// an HTTP URL (--health-url), run every --health-interval. A check that
// has not ended when its interval has passed failed, and a command is then
// killed with everything it started.

// maxCheckOutput is how much of a health command's output is kept, for the
// last line of it that a failure quotes.
const maxCheckOutput = 4 << 10

// maxCheckQuote is the most of a failing check's output or body an error
// quotes.
const maxCheckQuote = 200

// commandCheck returns a health check that runs command with /bin/sh -c
// and env, in a process group of its own, and passes when it exits 0. A
// failure names the exit status and quotes the last line the command
// printed (stdout and stderr together).
func commandCheck(command string, env []string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		cmd.Env = env
		out := &cappedBuffer{max: maxCheckOutput}
		cmd.Stdout, cmd.Stderr = out, out
		ownGroup(cmd) // ctx's end kills the command and what it started
		cmd.WaitDelay = time.Second
		err := cmd.Run()
		if err == nil {
			return nil
		}
		quote := lastLine(out.Bytes())
		if quote != "" {
			quote = ": " + quote
		}
		var exit *exec.ExitError
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("health command %q did not finish in time and was killed%s", command, quote)
		case errors.As(err, &exit):
			return fmt.Errorf("health command %q %s%s", command, describeExit(exit), quote)
		}
		return fmt.Errorf("health command %q: %w", command, err)
	}
}

// describeExit says how a command ended: "exited 3" or "was killed by
// signal 9 (killed)".
func describeExit(exit *exec.ExitError) string {
	if code := exit.ExitCode(); code >= 0 {
		return fmt.Sprintf("exited %d", code)
	}
	return "ended: " + exit.String()
}

// urlCheck returns a health check that GETs target with client and passes
// on a 2xx status. A failure names the URL (without its credentials), the
// status and the first line of the body.
func urlCheck(client *http.Client, target string) func(ctx context.Context) error {
	shown := redactURL(target)
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return fmt.Errorf("health URL %s: %w", shown, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err // its text repeats the URL, with its credentials
			}
			return fmt.Errorf("GET %s: %w", shown, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxCheckOutput))
			return nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxCheckOutput))
		quote := firstLine(body)
		if quote != "" {
			quote = ": " + quote
		}
		return fmt.Errorf("GET %s: %s%s", shown, resp.Status, quote)
	}
}

// lastLine is the last non-empty line of out, trimmed and cut to
// maxCheckQuote.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return cutQuote(lines[len(lines)-1])
}

// firstLine is the first line of body, trimmed and cut to maxCheckQuote.
func firstLine(body []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	return cutQuote(line)
}

func cutQuote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= maxCheckQuote {
		return s
	}
	s = s[:maxCheckQuote]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// cappedBuffer keeps the last max bytes written to it.
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > b.max {
		p = p[len(p)-b.max:]
	}
	if over := b.buf.Len() + len(p) - b.max; over > 0 {
		b.buf.Next(over)
	}
	b.buf.Write(p)
	return n, nil
}

func (b *cappedBuffer) Bytes() []byte { return b.buf.Bytes() }
