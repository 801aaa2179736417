package main

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/sirupsen/logrus"
)

// runOnce is run --once: one attempt to lead the key, running COMMAND once
// if it wins (see election.Election.Once), and returns the exit code.
func runOnce(ctx context.Context, e *election.Election, sup *supervisor, wait time.Duration, log *logrus.Entry) (int, error) {
	log.WithField("wait", wait.String()).Info("trying once")
	outcome, err := e.Once(ctx, wait, func(leading context.Context) error {
		sup.lead(leading)
		return nil
	})
	switch {
	case outcome == election.OnceRan:
		switch {
		case errors.Is(err, election.ErrWorkInterrupted):
			log.Warn("leadership ended before COMMAND did: the key is not marked done")
		case errors.Is(err, election.ErrDoneUnconfirmed):
			log.Warn("the command ran, but the key's done mark could not be confirmed: another host may run the job again")
		}
		return sup.exitCode(), nil
	case err != nil && sup.shuttingDown():
		if sig, ok := sup.sig.(syscall.Signal); ok {
			return 128 + int(sig), nil // interrupted before COMMAND started
		}
		return exitError, nil
	case err != nil:
		return 0, err
	}
	log.WithField("outcome", outcome.String()).Info("not running COMMAND: another host leads the key or ran the job")
	return exitSkipped, nil
}
