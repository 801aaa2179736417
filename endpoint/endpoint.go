package endpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvelect/election"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// DefaultQueueGroup is the queue group of an endpoint's subscription unless
// Config.QueueGroup names another: the same for every endpoint, so that two
// subscriptions on a subject, of any elections, share each request.
const DefaultQueueGroup = "kvelect"

// DefaultVersion is the micro service's version unless Config.Version
// gives one.
const DefaultVersion = "0.0.0"

// EndpointName is the name of the service's one endpoint, as nats micro
// info lists it.
const EndpointName = "leader"

// Errors of New and Serve.
var (
	// ErrInvalidConfig is returned by New for a Config it cannot serve.
	ErrInvalidConfig = errors.New("endpoint: invalid config")
	// ErrNotLeading is returned by Serve for a context that is not a
	// leadership's, or whose leadership has ended.
	ErrNotLeading = errors.New("endpoint: not leading")
	// ErrServing is returned by Serve while another call of Serve serves.
	ErrServing = errors.New("endpoint: already serving")
)

// Handler answers one request while the leadership lasts. ctx carries the
// leadership (election.TokenFromContext, election.WorkDeadline) and is done
// at its work deadline, or as soon as the leadership ends if it ended
// because the machine was suspended (context.Cause(ctx) then matches
// election.ErrSuspended). Return the reply, or an error: an *Error is the
// micro error reply it describes, any other error a reply with code 500
// and its text. The reply is sent only if the leadership still lasts.
type Handler func(ctx context.Context, req micro.Request) (Reply, error)

// Reply is a handler's answer: its data and headers. The Fencing-Token
// header is set on every reply, over any the handler sets.
type Reply struct {
	Data    []byte
	Headers micro.Headers
}

// Error is a handler's error reply: micro's Nats-Service-Error-Code and
// Nats-Service-Error headers, with Data as the body.
type Error struct {
	Code        string // such as "503"
	Description string
	Data        []byte
	Headers     micro.Headers
}

func (e *Error) Error() string { return e.Code + " " + e.Description }

// Config says what an Endpoint serves.
type Config struct {
	// Subject is the subject served (required): no wildcards, see
	// CheckSubject.
	Subject string
	// Handler answers the requests (required).
	Handler Handler
	// Name is the micro service's name, as nats micro ls lists it: letters,
	// digits, - and _ (CheckServiceName; ServiceName makes one of a key).
	// Default: "kvelect".
	Name string
	// Version is the micro service's version, semantic: default
	// DefaultVersion.
	Version string
	// Description is the micro service's description.
	Description string
	// Metadata is added to the micro service's; the service also carries
	// the leadership's token under "fencing_token".
	Metadata map[string]string
	// QueueGroup is the subscription's queue group: default
	// DefaultQueueGroup. Give every endpoint of a subject the same one.
	QueueGroup string
	// Logger logs when serving starts and stops; nil: none.
	Logger *slog.Logger
}

// Endpoint serves Config.Subject while a leadership lasts: call Serve from
// the election's OnWon. Serve may be called once per leadership, one call
// at a time.
type Endpoint struct {
	nc      *nats.Conn
	cfg     Config
	log     *slog.Logger
	serving sync.Mutex // held while Serve serves
	// handled, if set (by tests), is called once each request delivered has
	// been answered or dropped.
	handled func()
}

// New checks cfg and returns an Endpoint that serves it on nc.
func New(nc *nats.Conn, cfg Config) (*Endpoint, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: the connection is nil", ErrInvalidConfig)
	}
	if err := CheckSubject(cfg.Subject); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.Handler == nil {
		return nil, fmt.Errorf("%w: the handler is nil", ErrInvalidConfig)
	}
	if cfg.Name == "" {
		cfg.Name = "kvelect"
	}
	if err := CheckServiceName(cfg.Name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.Version == "" {
		cfg.Version = DefaultVersion
	}
	if cfg.QueueGroup == "" {
		cfg.QueueGroup = DefaultQueueGroup
	}
	if err := CheckQueueGroup(cfg.QueueGroup); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg.Metadata = maps.Clone(cfg.Metadata)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("subject", cfg.Subject, "service", cfg.Name)
	return &Endpoint{nc: nc, cfg: cfg, log: log}, nil
}

// Subject is the subject the endpoint serves.
func (ep *Endpoint) Subject() string { return ep.cfg.Subject }

// QueueGroup is the queue group of the endpoint's subscription.
func (ep *Endpoint) QueueGroup() string { return ep.cfg.QueueGroup }

// Serve serves the subject while the leadership whose context is leading
// lasts (the context OnWon received, or one derived from it that ends
// sooner), and returns once it has stopped: it adds the micro service and
// confirms the subscription with the server, serves, and when leading is
// done stops the service, confirms the unsubscribe with the server and
// waits for the request being handled, all within the leadership's work
// deadline. Past that deadline it returns without waiting further, with
// an error saying what was left undone; so does a failure to add the
// service. It returns ErrNotLeading if the leadership has already ended.
func (ep *Endpoint) Serve(leading context.Context) error {
	token, ok := election.TokenFromContext(leading)
	if !ok {
		return fmt.Errorf("%w: the context is not a leadership's (pass the one OnWon received)", ErrNotLeading)
	}
	if !ep.serving.TryLock() {
		return ErrServing
	}
	defer ep.serving.Unlock()
	t, err := newTenure(leading, token)
	if err != nil {
		return err
	}
	defer t.close()
	log := ep.log.With("token", token)

	svc, err := ep.add(t)
	if err != nil {
		return err
	}
	// The subscription exists at the server once a flush returns: from
	// then on requests reach this endpoint.
	if err := ep.flush(t); err != nil {
		stopErr := ep.stop(t, svc)
		return errors.Join(fmt.Errorf("endpoint: subscribing to %s: %w", ep.cfg.Subject, err), stopErr)
	}
	log.Info("serving the endpoint", "queue_group", ep.cfg.QueueGroup)
	<-leading.Done()
	err = ep.stop(t, svc)
	if err != nil {
		log.Warn("stopped serving the endpoint, not cleanly", "error", err.Error())
		return err
	}
	log.Info("stopped serving the endpoint")
	return nil
}

// add adds the micro service with its endpoint.
func (ep *Endpoint) add(t *tenure) (micro.Service, error) {
	md := maps.Clone(ep.cfg.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	md["fencing_token"] = strconv.FormatUint(t.token, 10)
	svc, err := micro.AddService(ep.nc, micro.Config{
		Name:        ep.cfg.Name,
		Version:     ep.cfg.Version,
		Description: ep.cfg.Description,
		Metadata:    md,
		QueueGroup:  ep.cfg.QueueGroup,
		ErrorHandler: func(_ micro.Service, err *micro.NATSError) {
			ep.log.Warn("endpoint subscription failed", "token", t.token, "error", err.Error())
		},
	})
	if err != nil {
		return nil, fmt.Errorf("endpoint: adding the service %s: %w", ep.cfg.Name, err)
	}
	err = svc.AddEndpoint(EndpointName, micro.HandlerFunc(func(req micro.Request) { ep.handle(t, req) }),
		micro.WithEndpointSubject(ep.cfg.Subject), micro.WithEndpointQueueGroup(ep.cfg.QueueGroup))
	if err != nil {
		svc.Stop()
		return nil, fmt.Errorf("endpoint: serving %s: %w", ep.cfg.Subject, err)
	}
	return svc, nil
}

// flush confirms with the server, within the work deadline, that it has
// processed everything sent on the connection so far.
func (ep *Endpoint) flush(t *tenure) error {
	// FlushWithContext wants a deadline: the last one read, which the work
	// context's end can only make sooner.
	ctx, cancel := context.WithDeadline(t.work, t.lastDeadline())
	defer cancel()
	if err := ep.nc.FlushWithContext(ctx); err != nil {
		if cause := context.Cause(t.work); cause != nil {
			return cause
		}
		return err
	}
	return nil
}

// stop stops the service: its subscriptions are drained (the unsubscribes
// are sent, and what the server delivered before them is handed to the
// handler, which drops it), the server confirms the unsubscribes, and the
// request being handled finishes; within the work deadline.
func (ep *Endpoint) stop(t *tenure, svc micro.Service) error {
	t.end()
	var errs []error
	if err := svc.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("endpoint: stopping the service: %w", err))
	}
	if err := ep.flush(t); err != nil {
		errs = append(errs, fmt.Errorf("endpoint: confirming the unsubscribe from %s: %w", ep.cfg.Subject, err))
	}
	select {
	case <-t.idle:
	case <-t.work.Done():
		errs = append(errs, fmt.Errorf("endpoint: a request to %s was still being handled at the work deadline; its reply is not sent", ep.cfg.Subject))
	}
	return errors.Join(errs...)
}

// handle answers req if the leadership lasts, and drops it otherwise.
func (ep *Endpoint) handle(t *tenure, req micro.Request) {
	if ep.handled != nil {
		defer ep.handled()
	}
	if !t.enter() {
		return // delivered after the leadership ended: no reply
	}
	defer t.leave()
	reply, err := ep.cfg.Handler(t.work, req)
	if !t.leading() {
		return // the leadership ended while the handler ran: no reply
	}
	token := strconv.FormatUint(t.token, 10)
	if err != nil {
		e := errorReply(err)
		headers := micro.Headers{}
		maps.Copy(headers, e.Headers)
		headers[election.TokenHeader] = []string{token}
		if err := req.Error(e.Code, e.Description, e.Data, micro.WithHeaders(headers)); err != nil {
			ep.log.Warn("sending an error reply failed", "token", t.token, "error", err.Error())
		}
		return
	}
	headers := micro.Headers{}
	maps.Copy(headers, reply.Headers)
	headers[election.TokenHeader] = []string{token}
	if err := req.Respond(reply.Data, micro.WithHeaders(headers)); err != nil {
		// Too large for the server's max_payload, say: tell the requester.
		ep.log.Warn("sending a reply failed", "token", t.token, "error", err.Error())
		req.Error("500", "the reply could not be sent: "+err.Error(), nil,
			micro.WithHeaders(micro.Headers{election.TokenHeader: []string{token}}))
	}
}

// errorReply is the error reply for a handler's error err.
func errorReply(err error) *Error {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: "500", Description: err.Error()}
	}
	out := *e
	// micro refuses an error reply without a code or a description.
	if out.Code == "" {
		out.Code = "500"
	}
	if out.Description == "" {
		out.Description = "error " + out.Code
	}
	return &out
}

// errWorkDeadline is the cause of a tenure's work context once its work
// deadline has passed.
var errWorkDeadline = errors.New("the leadership's work deadline passed")

// tenure is one leadership of an Endpoint: the leadership context, the
// work context that ends at its work deadline (which moves later with each
// renewal), and the request being handled.
type tenure struct {
	leadingCtx context.Context
	token      uint64
	work       context.Context // done at the work deadline, or at a suspend
	endWork    context.CancelCauseFunc
	tracked    chan struct{}             // closed when track has returned
	deadline   atomic.Pointer[time.Time] // the work deadline last read

	mu      sync.Mutex
	ended   bool          // the endpoint is stopping: no request is let in
	running int           // requests being handled: 0 or 1
	idle    chan struct{} // closed once ended and no request runs
}

// newTenure starts following the work deadline of the leadership whose
// context is leading, with its token.
func newTenure(leading context.Context, token uint64) (*tenure, error) {
	deadline, ok := election.WorkDeadline(leading)
	if !ok || leading.Err() != nil {
		return nil, fmt.Errorf("%w: the leadership of token %d has ended", ErrNotLeading, token)
	}
	work, endWork := context.WithCancelCause(context.WithoutCancel(leading))
	t := &tenure{
		leadingCtx: leading, token: token, work: work, endWork: endWork,
		tracked: make(chan struct{}), idle: make(chan struct{}),
	}
	t.deadline.Store(&deadline)
	go func() {
		defer close(t.tracked)
		t.track(deadline)
	}()
	return t, nil
}

// track ends the work context at the work deadline: it rereads the
// deadline, which moves later with each renewal, while the leadership
// lasts, each time a quarter of the time left to it has passed, and after
// the leadership has ended keeps the last one it read; or at once, with
// the leadership's cause, when the leadership ended because the machine
// was suspended (election.ErrSuspended).
func (t *tenure) track(deadline time.Time) {
	// What the machine had slept when the leadership began: a sleep since
	// ends the leadership (ErrSuspended) or, once it has ended, the work.
	base := election.Suspended(t.leadingCtx)
	for {
		wait := time.Until(deadline) / 4
		if wait <= 0 {
			break
		}
		timer := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-timer.C:
		case <-t.leadingCtx.Done():
		case <-t.work.Done():
			timer.Stop()
			return
		}
		timer.Stop()
		if t.leadingCtx.Err() != nil {
			break
		}
		d, ok := election.WorkDeadline(t.leadingCtx)
		if !ok {
			break
		}
		deadline = d
		t.deadline.Store(&d)
	}
	// The timer runs on Go's monotonic clock, which on Linux stands still
	// while the machine is suspended: after a sleep it would end the work
	// late by the sleep's length, beside a successor. A leadership that
	// ended for a suspend ends the work at once instead, and so does a
	// sleep while the work drains (election.SleptSince, read every
	// drainPoll).
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	poll := time.NewTicker(drainPoll)
	defer poll.Stop()
	leadingDone := t.leadingCtx.Done()
	for {
		select {
		case <-timer.C:
			t.endWork(errWorkDeadline)
			return
		case <-leadingDone:
			if cause := context.Cause(t.leadingCtx); errors.Is(cause, election.ErrSuspended) {
				t.endWork(cause)
				return
			}
			leadingDone = nil
		case <-poll.C:
			if election.SleptSince(t.leadingCtx, base) {
				t.endWork(fmt.Errorf("%w while the work drained", election.ErrSuspended))
				return
			}
		case <-t.work.Done():
			return
		}
	}
}

// drainPoll is how often a draining work's tenure reads whether the
// machine slept: within it of a resume, the work's context ends.
const drainPoll = 10 * time.Millisecond

// lastDeadline is the work deadline last read.
func (t *tenure) lastDeadline() time.Time { return *t.deadline.Load() }

// leading reports whether the leadership lasts: its context is not done,
// and its validity deadline has not passed on the election's clock (which
// a process paused through it sees before its election cancels the
// context).
func (t *tenure) leading() bool {
	if t.leadingCtx.Err() != nil {
		return false
	}
	_, ok := election.WorkDeadline(t.leadingCtx)
	return ok
}

// enter lets a request in, unless the endpoint is stopping or the
// leadership has ended.
func (t *tenure) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended || !t.leading() {
		return false
	}
	t.running++
	return true
}

// leave marks a request let in by enter as done.
func (t *tenure) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running--
	if t.ended && t.running == 0 {
		close(t.idle)
	}
}

// end lets no more requests in; idle is closed once none runs.
func (t *tenure) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return
	}
	t.ended = true
	if t.running == 0 {
		close(t.idle)
	}
}

// close stops following the work deadline, and ends the work context.
func (t *tenure) close() {
	t.endWork(context.Canceled)
	<-t.tracked
}
