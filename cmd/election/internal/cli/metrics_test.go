package cli

import (
	"net"
	"testing"
	"time"

	"github.com/kvelect/election/cmd/election/internal/e2e"
	"github.com/kvelect/election/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

func TestRunMetricsErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	s := testenv.Server(t)
	url := s.ClientURL()
	_, js := testenv.Connect(t, url)
	testenv.Bucket(t, js, jetstream.KeyValueConfig{Bucket: "ELECTIONS", TTL: 2 * time.Second})
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for name, tc := range map[string]struct {
		args []string
		code int
		says []string
	}{
		"no port":            {[]string{"--metrics", "localhost"}, 2, []string{`--metrics "localhost": want HOST:PORT`}},
		"negative tolerance": {[]string{"--metrics", ":0", "--health-tolerance", "-1s"}, 2, []string{"--health-tolerance -1s: want a duration of 0 or more"}},
		"port taken":         {[]string{"--metrics", taken.Addr().String()}, 1, []string{"--metrics: listen tcp " + taken.Addr().String(), "address already in use"}},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"run", "-s", url, "--key", "k"}, tc.args...)
			code, stdout, stderr := runCLI(t, append(args, "--", "true")...)
			e2e.WantOneLineError(t, code, tc.code, stdout, stderr, tc.says...)
		})
	}
}
