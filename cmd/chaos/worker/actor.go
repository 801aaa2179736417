//go:build unix

package worker

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
)

// The environment of an -agents run's daemons: the harness sets it on each
// election agent, which passes its environment on to its daemons' commands.
const (
	ActorBinEnv    = "CHAOS_BIN"    // the chaos binary, which runs the actor
	ActorURLsEnv   = "CHAOS_URLS"   // the NATS URLs of the agent's proxies
	ActorSocketEnv = "CHAOS_SOCKET" // the harness's socket for the actors' records
)

// RunActor is the work of one daemon of an -agents run: the process that an
// election agent's daemon command starts, under a shell that forks. It
// reads the daemon's token, name and node from KVELECT_TOKEN,
// KVELECT_DAEMON and KVELECT_NODE, and acts on the daemon's subject of the
// fenced resource with that token every actInterval, as a node's daemon
// does, until SIGTERM. Its records (its start, each act, its stop) go to
// the harness over a Unix socket of its own: what it wrote before it was
// killed has reached the harness, whatever the shell around it did with
// its standard output. It exits as soon as a record cannot be written, so
// that it does not outlive the harness.
func RunActor(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q: the actor reads its environment", args[0])
	}
	token, err := strconv.ParseUint(os.Getenv("KVELECT_TOKEN"), 10, 64)
	if err != nil {
		return fmt.Errorf("KVELECT_TOKEN: %w", err)
	}
	daemon, node := os.Getenv("KVELECT_DAEMON"), os.Getenv("KVELECT_NODE")
	urls, socket := os.Getenv(ActorURLsEnv), os.Getenv(ActorSocketEnv)
	if daemon == "" || node == "" || urls == "" || socket == "" {
		return fmt.Errorf("want KVELECT_DAEMON, KVELECT_NODE, %s and %s in the environment", ActorURLsEnv, ActorSocketEnv)
	}
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return err
	}
	rec := record.New(harnessLink{conn}, node)
	rec.Record(record.Event{Kind: "start", Daemon: daemon, Token: token, PID: os.Getpid()})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	for ctx.Err() == nil {
		c, err := connectWorker(ctx, node, urls, BucketName, "")
		if err != nil {
			rec.Record(record.Event{Kind: "connect-error", Daemon: daemon, Token: token, Err: err.Error()})
			retry := time.NewTimer(actInterval) // binding fails at once while no server answers
			select {
			case <-ctx.Done():
			case <-retry.C:
			}
			retry.Stop()
			continue
		}
		r := Fence{Worker: node, PID: os.Getpid()}
		actUntilDone(ctx, c.fence, rec, FenceSubject+"."+daemon, daemon, token, r)
		c.nc.Close()
	}
	rec.Record(record.Event{Kind: "stop", Daemon: daemon, Token: token, Cause: context.Cause(ctx).Error()})
	return nil
}

// harnessLink is an actor's connection to the harness. A write that fails
// ends the actor: the harness has gone, and with it the run.
type harnessLink struct{ net.Conn }

// Write writes p, or exits the process if it cannot.
func (l harnessLink) Write(p []byte) (int, error) {
	n, err := l.Conn.Write(p)
	if err != nil {
		os.Exit(3)
	}
	return n, err
}
