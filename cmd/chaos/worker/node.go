//go:build unix

package worker

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/kvelect/election"
	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/fleet"
)

// drain is how long a daemon takes to stop when it is moved: it goes on
// acting on the fenced resource until then, as a relay flushing its last
// batch would, unless the node loses its hold on the daemon meanwhile
// (fleet.DrainContext). The fleet must let the daemon go only after.
const drain = 2 * actInterval

// RunNode is one node process of a fleet run: it joins the fleet in the
// bucket, able to run every daemon listed, and each daemon it runs acts on
// its own subject of the fenced resource with its own token. It writes its
// history to stdout, the KV calls on daemon keys and each daemon's runs
// included, and leaves the fleet on SIGTERM. Once it has left it exits
// when its stdin closes, as a worker does.
func RunNode(args []string) error {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	name := fs.String("name", "", "node name")
	urls := fs.String("urls", "", "NATS URLs, comma separated")
	bucket := fs.String("bucket", "", "election bucket")
	domain := fs.String("domain", "", "the bucket's JetStream domain (empty: the server's own)")
	daemons := fs.String("daemons", "", "daemon names, comma separated")
	unsafeTTL := fs.Bool("unsafe-short-ttl", false, "allow TTLs below election.MinTTL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rec := record.New(os.Stdout, *name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	c, err := connectWorker(ctx, *name, *urls, *bucket, *domain, func(server string) {
		rec.Record(record.Event{Kind: "connected", Target: server})
	})
	if err != nil {
		return err
	}
	defer c.nc.Close()
	kv, fenced := c.kv, c.fence
	var defaults []election.Option
	if *unsafeTTL {
		defaults = append(defaults, election.WithUnsafeShortTTL())
	}
	daemonPrefix := fleet.DaemonKey("")
	recorded := &record.KV{KeyValue: kv, Rec: rec, DaemonOf: func(key string) (string, bool) {
		return strings.CutPrefix(key, daemonPrefix)
	}}
	b, err := election.OpenBucket(ctx, recorded, defaults...)
	if err != nil {
		return err
	}
	defer b.Close()

	cfg := fleet.Config{Name: *name}
	for _, d := range strings.Split(*daemons, ",") {
		cfg.Daemons = append(cfg.Daemons, fleet.Daemon{Name: d, Run: func(ctx context.Context) error {
			token, _ := election.TokenFromContext(ctx)
			rec.Record(record.Event{Kind: "won", Daemon: d, Token: token})
			subject, r := FenceSubject+"."+d, Fence{Worker: *name}
			actUntilDone(ctx, fenced, rec, subject, d, token, r)
			if errors.Is(context.Cause(ctx), fleet.ErrRevoked) {
				flush, cancel := context.WithTimeout(fleet.DrainContext(ctx), drain)
				actUntilDone(flush, fenced, rec, subject, d, token, r)
				cancel()
			}
			rec.Record(record.Event{Kind: "lost", Daemon: d, Token: token, Cause: context.Cause(ctx).Error()})
			rec.Record(record.Event{Kind: "returned", Daemon: d, Token: token})
			return nil
		}})
	}
	rec.Record(record.Event{Kind: "start", PID: os.Getpid()})
	node, err := fleet.Join(ctx, b, cfg)
	if err != nil {
		rec.Record(record.Event{Kind: "exit", Err: err.Error()})
		return err
	}
	rec.Record(record.Event{Kind: "joined"})
	<-ctx.Done()
	node.Leave()
	rec.Record(record.Event{Kind: "exit"})
	io.Copy(io.Discard, os.Stdin)
	return nil
}
