package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvelect/election"
	"github.com/kvelect/election/endpoint"
	"github.com/kvelect/election/internal/guard"
	"github.com/kvelect/election/sidecar"
	"github.com/sirupsen/logrus"
)

// supervisor runs COMMAND while this process leads, as OnWon, and turns
// COMMAND's exit and the process's signals into the end of the election.
//
// The key is released only after COMMAND has exited: the election is
// ended (endElection, which makes Start stop and release) by lead once
// COMMAND is gone, or by watchSignals when no COMMAND runs.
type supervisor struct {
	argv        []string
	env         []string // the environment, without the token
	grace       time.Duration
	log         *logrus.Entry
	endElection context.CancelFunc
	once        bool                // run --once: COMMAND runs at most once, and ending it does not end the election
	leaderFile  *sidecar.LeaderFile // --leader-file, or nil
	endpoint    *endpoint.Endpoint  // --serve, or nil
	// start starts COMMAND under its guard: startGuarded, which a test
	// may replace.
	start func(leading context.Context, argv, env []string, token uint64) (*guard.Child, error)

	shutdown chan struct{} // closed on the first SIGINT or SIGTERM
	sig      os.Signal     // that signal; written before shutdown is closed

	mu    sync.Mutex
	child *guard.Child // the running COMMAND, nil when none runs
	// stopsCommand: the shutdown came while COMMAND ran, and election
	// run then exits with COMMAND's status. A shutdown that came once
	// COMMAND had gone for the leadership's end (killed at the work
	// deadline after a pause, or stopped when the leadership ended), before
	// lead cleared child, exits 0, as one that finds no COMMAND running.
	stopsCommand bool
	code         int // the exit code of election run
	// outcome is, with --once, how COMMAND's run ended: nil if it exited
	// by itself with status 0, else a *jobError (nil too before it ran).
	outcome error
}

func newSupervisor(cfg runConfig, log *logrus.Entry, endElection context.CancelFunc) *supervisor {
	env := append(os.Environ(),
		"KVELECT_LEADER="+cfg.name,
		"KVELECT_KEY="+cfg.key,
		"KVELECT_BUCKET="+cfg.bucket,
	)
	return &supervisor{
		argv:        cfg.argv,
		env:         env,
		grace:       cfg.grace,
		log:         log,
		endElection: endElection,
		start:       startGuarded,
		shutdown:    make(chan struct{}),
	}
}

// lead is the OnWon callback: it runs COMMAND until it exits by itself,
// leadership ends, or a signal asks to shut down.
func (s *supervisor) lead(leading context.Context) {
	token, _ := election.TokenFromContext(leading)
	log := s.log.WithField("token", token)

	s.mu.Lock()
	if s.shuttingDown() {
		if s.once {
			s.code = ExitError
			if sig, ok := s.sig.(syscall.Signal); ok {
				s.code = 128 + int(sig)
			}
			s.outcome = &jobError{code: s.code, why: fmt.Sprintf("election run was told to stop (%v) before the command started", s.sig)}
		}
		s.mu.Unlock()
		return
	}
	if _, ok := election.WorkDeadline(leading); !ok {
		// Paused between the win and here: this leadership is over, and
		// neither the leader file nor COMMAND is for it.
		s.endedBeforeStart(log)
		s.mu.Unlock()
		return
	}
	if s.leaderFile != nil {
		// Written before COMMAND starts; removed when leadership ends,
		// or else when lead returns, which is before the key's release.
		defer s.leaderFile.Hold(leading, token)()
	}
	for s.runCommand(leading, token, log) {
		s.mu.Lock()
		if s.shuttingDown() {
			// The signal found no COMMAND running and ended the election.
			s.mu.Unlock()
			return
		}
	}
}

// lastsAfterKill reports whether, after its guard killed COMMAND at the
// work deadline it knew, or reported nothing until then, the leadership
// still lasts, so that COMMAND runs again at once (unless --once, or a
// signal asked to shut down), as an agent's daemon does after a backoff:
// the deadline had moved, but the guard did not see it in time (the pipe
// to a long-stopped guard filled, or the guard or this process ran too
// late on a loaded machine). This is safe: the killed tree has gone, and
// the leadership is vouched for until its work deadline, which guard.Start
// checks again. Waiting for the leadership's end instead would hold the
// key with no COMMAND for as long as this process renews; OnWon has no
// way to stand down by itself, and ending the election would end election
// run.
func (s *supervisor) lastsAfterKill(leading context.Context) bool {
	_, ok := election.WorkDeadline(leading)
	return ok && !s.once && !s.shuttingDown()
}

// runCommand starts COMMAND for the leadership leading and supervises it
// until it has gone, with s.mu held, which it releases. It returns true if
// COMMAND is to run again for the same leadership (lastsAfterKill).
func (s *supervisor) runCommand(leading context.Context, token uint64, log *logrus.Entry) (again bool) {
	c, err := s.start(leading, s.argv, s.env, token)
	if errors.Is(err, guard.ErrLeadershipEnded) {
		if s.lastsAfterKill(leading) {
			log.WithError(err).Warn("the command did not start by the work deadline its guard knew, but the leadership lasts: starting the command again")
			s.mu.Unlock()
			return true
		}
		s.endedBeforeStart(log)
		s.mu.Unlock()
		return false
	}
	if err != nil {
		log.WithError(err).Error("could not start the command; releasing the key")
		s.code = exitCannotRun
		if !s.once {
			s.endElection()
		}
		s.mu.Unlock()
		return false
	}
	s.child = c
	s.mu.Unlock()
	log = log.WithField("pid", c.PID())
	log.WithField("command", strings.Join(s.argv, " ")).Info("leading: started the command")

	// The endpoint serves while COMMAND runs, the leadership lasts and no
	// signal asked to shut down, and has stopped before lead returns, so
	// before the key is released.
	serving, stopServing := context.WithCancel(leading)
	served := make(chan struct{})
	if s.endpoint != nil {
		go func() {
			defer close(served)
			serveWhileLeading(s.endpoint, serving, log)
		}()
	} else {
		close(served)
	}

	g := guarded{child: c, grace: s.grace, what: "command", who: "this process", log: log}
	byItself, _ := g.supervise(leading, s.shutdown, func() syscall.Signal { return s.sig.(syscall.Signal) }, func(shutdown bool) {
		stopServing() // COMMAND is being stopped: serve no more
		if shutdown {
			log.WithField("signal", s.sig.String()).Info("passing the signal to the command")
		} else {
			log.Warn("leadership ended: stopping the command")
		}
	})
	stopServing()
	<-served
	if c.Expired() {
		s.mu.Lock()
		lasts := s.lastsAfterKill(leading)
		if lasts {
			s.child = nil
		}
		s.mu.Unlock()
		if lasts {
			log.Warn("the command was killed at the work deadline its guard knew (was the guard stopped?), but the leadership lasts: starting the command again")
			return true
		}
		// The validity deadline comes before the work deadline: the
		// election stands down, if it has not yet.
		log.Warn("the command was killed at the leadership's work deadline: this process did not renew in time (was it paused?)")
		<-leading.Done()
	}
	code := c.ExitCode()
	log = log.WithField("status", code)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.child = nil
	if s.once {
		s.outcome = jobOutcome(code, byItself, s.stopsCommand, s.sig)
	}
	switch {
	case byItself && s.once && code == 0:
		log.Info("the command exited by itself; marking the key done")
	case byItself && s.once:
		log.Warn("the command failed; releasing the key unmarked, for another host to run the job")
	case byItself:
		log.Info("the command exited by itself; releasing the key")
	case s.stopsCommand || s.once:
		log.Info("the command stopped; releasing the key unmarked")
	case s.shuttingDown():
		// The signal came after COMMAND had gone for the leadership's
		// end: its status is not what the signal brought about.
		log.Info("the command had stopped for the leadership's end before the signal came; ending the election")
		s.endElection()
		return false
	default:
		log.Info("the command stopped; campaigning again")
		return false
	}
	s.code = code
	if !s.once {
		s.endElection()
	}
	return false
}

// endedBeforeStart is lead's end when the leadership ended before COMMAND
// could start (this process was paused right after winning): with --once
// the attempt is over, COMMAND not run; otherwise the election campaigns on
// and COMMAND starts when this process leads again. s.mu is held.
func (s *supervisor) endedBeforeStart(log *logrus.Entry) {
	if s.once {
		log.Warn("leadership ended before the command could start; not running it")
		s.code = exitCannotRun
		s.outcome = &jobError{code: exitCannotRun, why: "the leadership ended before the command could start"}
		return
	}
	log.Warn("leadership ended before the command could start; campaigning again")
}

// watchSignals waits for SIGINT or SIGTERM until done is closed. The first
// one starts the shutdown: lead passes it to COMMAND, or the election ends
// at once if no COMMAND runs. A second one kills COMMAND.
func (s *supervisor) watchSignals(signals <-chan os.Signal, done <-chan struct{}) {
	select {
	case sig := <-signals:
		s.sig = sig
	case <-done:
		return
	}
	s.log.WithField("signal", s.sig.String()).Info("shutting down")
	s.mu.Lock()
	close(s.shutdown)
	s.stopsCommand = s.child != nil && !s.child.Exited()
	if s.child == nil {
		s.endElection()
	}
	s.mu.Unlock()
	for {
		select {
		case <-signals:
			s.mu.Lock()
			if s.child != nil {
				s.log.Warn("second signal: killing the command")
				s.child.Kill()
			}
			s.mu.Unlock()
		case <-done:
			return
		}
	}
}

// shuttingDown reports whether a signal asked to shut down.
func (s *supervisor) shuttingDown() bool {
	select {
	case <-s.shutdown:
		return true
	default:
		return false
	}
}

// jobError is a run of COMMAND under --once that did not succeed: Once
// records its exit status in the run log (ExitCode) and releases the key
// unmarked.
type jobError struct {
	code int
	why  string
}

func (e *jobError) Error() string { return e.why }

// ExitCode is COMMAND's exit status, or what election run exits with for
// it (126: it could not start).
func (e *jobError) ExitCode() int { return e.code }

// jobOutcome is how a run of COMMAND that exited with code ended: nil for a
// success, else a *jobError saying why it failed.
func jobOutcome(code int, byItself, shutdown bool, sig os.Signal) error {
	switch {
	case byItself && code == 0:
		return nil
	case byItself && code > 128:
		return &jobError{code: code, why: fmt.Sprintf("the command was killed by signal %d", code-128)}
	case byItself:
		return &jobError{code: code, why: fmt.Sprintf("the command exited with status %d", code)}
	case shutdown:
		return &jobError{code: code, why: fmt.Sprintf("election run was told to stop (%v): the command stopped with status %d", sig, code)}
	}
	return &jobError{code: code, why: fmt.Sprintf("the leadership ended: the command stopped with status %d", code)}
}

// onceOutcome is how COMMAND's run ended, for Once: see outcome.
func (s *supervisor) onceOutcome() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outcome
}

// exitCode is the exit code of election run, once the election has ended.
func (s *supervisor) exitCode() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code
}
