package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/kvelect/election"
)

// healthFlags are the flags that gate leadership on the app's health
// (election.WithHealthCheck), for run and sidecar.
type healthFlags struct {
	cmd      string        // a shell command that exits 0 while the app is healthy
	url      string        // or a URL that answers 2xx while it is
	interval time.Duration // how often the check runs; each has this long
	failures int           // failed checks in a row that make a leader stand down
	fs       *flagSet      // where they are defined, to tell which were given
}

// Defaults of --health-interval and --health-failures: a leader whose app
// stops answering hands over within about 15 s.
const (
	defaultHealthInterval = 5 * time.Second
	defaultHealthFailures = 3
)

// add defines the flags.
func (h *healthFlags) add(fs *flagSet) {
	h.fs = fs
	fs.StringVar(&h.cmd, "health-cmd", "", "lead only while the shell `COMMAND` exits 0: it runs every --health-interval; a leader whose check fails --health-failures times in a row hands the key over, and a candidate whose latest check failed does not claim it")
	fs.StringVar(&h.url, "health-url", "", "lead only while a GET of `URL` (http or https) answers 2xx, as --health-cmd")
	fs.DurationVar(&h.interval, "health-interval", defaultHealthInterval, "how often the health check runs, and how long each may take (`DURATION`: 10ms or more)")
	fs.IntVar(&h.failures, "health-failures", defaultHealthFailures, "`N` failed health checks in a row (1 or more) make a leader hand the key over")
}

// check says what is wrong with the flags, once parsed.
func (h *healthFlags) check() error {
	given := h.cmd != "" || h.url != ""
	set := map[string]bool{}
	h.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case h.cmd != "" && h.url != "":
		return usageErr{errors.New("--health-cmd and --health-url: give one health check, not both")}
	case !given && (set["health-interval"] || set["health-failures"]):
		return usageErr{errors.New("--health-interval and --health-failures are for --health-cmd or --health-url")}
	case h.interval < election.MinHealthInterval:
		return usageErr{fmt.Errorf("--health-interval %v: want at least %v", h.interval, election.MinHealthInterval)}
	case h.failures < 1:
		return usageErr{fmt.Errorf("--health-failures %d: want 1 or more", h.failures)}
	}
	if h.url != "" {
		u, err := url.Parse(h.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return usageErr{fmt.Errorf("--health-url %q: want an http:// or https:// URL", redactURL(h.url))}
		}
	}
	return nil
}

// options is the election option the flags ask for, none without a check.
// A health command gets this process's environment.
func (h *healthFlags) options() []election.Option {
	var check func(ctx context.Context) error
	switch {
	case h.cmd != "":
		check = commandCheck(h.cmd, os.Environ())
	case h.url != "":
		check = urlCheck(&http.Client{}, h.url)
	default:
		return nil
	}
	return []election.Option{election.WithHealthCheck(check, h.interval, h.failures)}
}
