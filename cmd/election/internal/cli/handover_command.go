package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kvelect/election"
)

const resignAbout = `Usage:
  election resign --key K [--bucket B] [--timeout 30s]

Asks the leader of K to stand down so that another candidate leads, waits
until a candidate claims K, and prints the new leader. If no other
candidate campaigns for K (election status lists them), resign fails at
once without asking, and the leader keeps leading. The leader sits out for
half the bucket's TTL; if no other candidate claims K by then, it may lead
again, and resign fails.

Exit status: 0 when another candidate leads; 1 if nobody leads K, no other
candidate campaigns for K, the leader took K back, no candidate claimed K within --timeout, or the server
or the bucket failed; 2 for bad flags.
`

const transferAbout = `Usage:
  election transfer --key K --to NAME [--bucket B] [--timeout 30s]

Asks the leader of K to hand it to the candidate NAME (its election run
--name), waits until a candidate claims K, and prints the new leader. NAME
claims K at once if it campaigns for K; every other candidate keeps away
for half the bucket's TTL, after which any of them may claim it, and
transfer fails. If NAME leads already, transfer prints it and exits 0.

Exit status: 0 when NAME leads; 1 if nobody leads K, NAME did not take K
within half a TTL, no candidate claimed K within --timeout, or the server or
the bucket failed; 2 for bad flags.
`

// handoverConfig is what the flags of resign and transfer say.
type handoverConfig struct {
	conn    connFlags
	key     string
	bucket  string
	to      string // "" for resign
	timeout time.Duration
}

// resignCommand defines the flags of "election resign" and returns them
// with the function that runs it.
func resignCommand() (*flagSet, runFunc) {
	return handoverCommand("election resign", resignAbout, false)
}

// transferCommand defines the flags of "election transfer" and returns them
// with the function that runs it.
func transferCommand() (*flagSet, runFunc) {
	return handoverCommand("election transfer", transferAbout, true)
}

// handoverCommand defines the flags of resign (transfer false) or transfer
// and returns them with the function that runs it.
func handoverCommand(path, about string, transfer bool) (*flagSet, runFunc) {
	fs := newFlagSet(path, about)
	var cfg handoverConfig
	cfg.conn.add(fs)
	fs.StringVar(&cfg.key, "key", "", "the election `KEY` (required)")
	fs.bucketVar(&cfg.bucket, "the election bucket's `NAME`")
	if transfer {
		fs.StringVar(&cfg.to, "to", "", "the `NAME` of the candidate to hand the key to (required)")
	}
	fs.DurationVar(&cfg.timeout, "timeout", 30*time.Second, "`DURATION` to wait for a candidate to claim the key")
	return fs, func(args []string, stdout, stderr io.Writer) int {
		if code, ok := fs.parse(args, stdout, stderr); !ok {
			return code
		}
		if fs.NArg() > 0 {
			return fs.usageError(stderr, "unexpected argument %q", fs.Arg(0))
		}
		if err := cfg.check(transfer); err != nil {
			return fs.usageError(stderr, "%v", err)
		}

		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx, stopWatching := cfg.conn.watchDenials(ctx, roleAdmin)
		defer stopWatching()
		nc, js, err := cfg.conn.connect(path)
		if err != nil {
			return fail(stderr, path, deniedOr(ctx, err))
		}
		defer nc.Close()
		openCtx, cancelOpen := context.WithTimeout(ctx, bucketTimeout)
		defer cancelOpen()
		kv, err := openBucket(openCtx, js, cfg.bucket)
		if err != nil {
			return fail(stderr, path, deniedOr(ctx, err))
		}
		b, err := election.OpenBucket(openCtx, kv)
		if err != nil {
			return fail(stderr, path, deniedOr(ctx, err))
		}
		defer b.Close()

		ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		defer cancel()

		var leader election.Leader
		if transfer {
			leader, err = b.Transfer(ctx, cfg.key, cfg.to)
		} else {
			leader, err = b.Resign(ctx, cfg.key)
		}
		err = deniedOr(ctx, err)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return fail(stderr, path, fmt.Errorf("no candidate claimed key %q of bucket %q within --timeout %v", cfg.key, cfg.bucket, cfg.timeout))
		case errors.Is(err, context.Canceled):
			return fail(stderr, path, fmt.Errorf("interrupted before a candidate claimed key %q of bucket %q", cfg.key, cfg.bucket))
		case err != nil:
			return fail(stderr, path, deniedOr(ctx, err))
		}
		fmt.Fprintf(stdout, "%s leads %s (revision %d)\n", leader.Name, leader.Key, leader.Revision)
		return ExitOK
	}
}

// check validates the flags before anything connects.
func (cfg *handoverConfig) check(transfer bool) error {
	if cfg.key == "" {
		return errors.New("--key is required: the key whose leader should stand down")
	}
	if transfer && cfg.to == "" {
		return errors.New("--to is required: the name of the candidate to hand the key to")
	}
	name := cfg.to
	if name == "" {
		name = "resign"
	}
	if err := election.CheckCandidate(name, cfg.key); err != nil {
		return err
	}
	if cfg.timeout <= 0 {
		return fmt.Errorf("--timeout %v: want a duration above 0", cfg.timeout)
	}
	return nil
}
