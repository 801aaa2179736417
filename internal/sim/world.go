package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	election "github.com/kvelect/election"
	"github.com/kvelect/election/fleet"
	ehistory "github.com/kvelect/election/history"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// bucket is the name of the simulation's bucket.
const bucket = "SIM"

// resumeFirst is how long after a suspended candidate's clock resumes its
// link does: at one instant of fake time the bubble runs goroutines in Go's
// order, and a watched entry delivered at the very instant of the resume
// could run before the candidate's clock had resumed.
const resumeFirst = time.Millisecond

// world is one seed's run: inside a synctest bubble, a real embedded
// nats-server (JetStream, memory storage, no listener), candidates of the
// real library on their own in-process connections and clocks, and the
// schedule's faults.
type world struct {
	s      Schedule
	srv    *server.Server
	adminC *nats.Conn
	admin  jetstream.KeyValue // another client's connection: removals
	keys   []string           // the Start keys, the Once key, then the fleet's daemons' keys
	cands  []*cand
	rec    *record
	hist   *history // every write that reached the server
	// runLog is the bucket's history, on the admin's connection, where
	// the Once jobs record their runs in a schedule with RunLog.
	runLog *ehistory.History
	faults map[Class]int
	ctx    context.Context
	stop   context.CancelFunc
}

// cand is one candidate: a process with its connection, clock and
// elections.
type cand struct {
	w     *world
	i     int
	spec  CandidateSpec
	nc    *nats.Conn
	kv    *KV
	clock *Clock
	rng   *rand.Rand // its Once jobs' lengths and failures
	// runLog is the bucket's history on its own connection, where its
	// Once jobs record their runs in a schedule with RunLog.
	runLog *ehistory.History

	mu         sync.Mutex
	bucket     *election.Bucket     // its Bucket, while up
	elections  []*election.Election // its Start elections, while up
	once       *election.Election   // its Once election, while one runs
	node       *fleet.Node          // its fleet node, while a member
	cancel     context.CancelFunc   // ends its Once loop
	running    sync.WaitGroup       // its Start and Once loops
	restarting bool
	jobEnd     chan struct{} // ends its running Once job now
	poke       chan struct{} // fires its Once job now
}

// newWorld starts the server and the candidates of s. It runs in the
// bubble; dir is the server's store directory.
func newWorld(s Schedule, dir string) (*world, error) {
	opts := &server.Options{JetStream: true, DontListen: true, StoreDir: dir, NoLog: true, NoSigs: true, JetStreamMaxMemory: 64 << 20, NoSublistCache: true}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("the embedded server did not start")
	}
	ctx, stop := context.WithCancel(context.Background())
	w := &world{s: s, srv: srv, faults: map[Class]int{}, ctx: ctx, stop: stop}
	for k := range s.StartKeys {
		w.keys = append(w.keys, fmt.Sprintf("job%d", k))
	}
	w.keys = append(w.keys, "cron")
	for d := range s.Daemons {
		w.keys = append(w.keys, fleet.DaemonKey(daemonName(d)))
	}
	nc, err := w.connect(time.Second)
	if err != nil {
		return nil, err
	}
	w.adminC = nc
	js, _ := jetstream.New(nc)
	admin, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, TTL: s.TTL - s.ServerLead, Storage: jetstream.MemoryStorage})
	if err != nil {
		return nil, err
	}
	w.rec, w.hist = newRecord(s), newHistory()
	w.admin = &recorded{KeyValue: admin, client: "admin", h: w.hist}
	if s.RunLog {
		// kept an hour: no record ages out within a run
		if w.runLog, err = ehistory.Create(ctx, js, bucket, time.Hour); err != nil {
			return nil, err
		}
	}
	for i, spec := range s.Candidates {
		nc, err := w.connect(spec.Reconnect)
		if err != nil {
			return nil, err
		}
		js, _ := jetstream.New(nc)
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			return nil, err
		}
		if s.breakCAS && i == 0 {
			kv = brokenCAS{kv}
		}
		kv = &recorded{KeyValue: kv, client: name(i), h: w.hist}
		c := &cand{w: w, i: i, spec: spec, nc: nc, clock: NewClock(spec.Rate),
			kv:  NewKV(kv, s.TTL, s.Seed^uint64(i+1)<<32, spec.Link),
			rng: rand.New(rand.NewPCG(s.Seed, uint64(i))), jobEnd: make(chan struct{}, 1), poke: make(chan struct{}, 1)}
		if s.RunLog && spec.OnceEvery > 0 {
			if c.runLog, err = ehistory.Open(ctx, js, bucket); err != nil {
				return nil, err
			}
		}
		w.cands = append(w.cands, c)
	}
	for _, c := range w.cands {
		c.start()
	}
	return w, nil
}

// connect connects a client to the server, one that reconnects after wait
// (no jitter: the seed decides) whenever its connection drops.
func (w *world) connect(wait time.Duration) (*nats.Conn, error) {
	return nats.Connect("", nats.InProcessServer(w.srv), nats.MaxReconnects(-1), nats.ReconnectWait(wait), nats.ReconnectJitter(0, 0))
}

// drop has the server close the connection nc.
func (w *world) drop(nc *nats.Conn) {
	if id, err := nc.GetClientID(); err == nil {
		_ = w.srv.DisconnectClientByID(id)
	}
}

// name is candidate i's name.
func name(i int) string { return fmt.Sprintf("c%d", i) }

// start opens the candidate's Bucket, if its elections use one, and starts
// its elections and its Once loop, as its process does when it starts.
func (c *cand) start() {
	ctx, cancel := context.WithCancel(c.w.ctx)
	var b *election.Bucket
	if c.spec.Bucket {
		b = c.openBucket(ctx)
	}
	var es []*election.Election
	for k := range c.w.s.StartKeys {
		work := election.OnWon(func(ctx context.Context) { c.work(ctx, k) })
		var e *election.Election
		if c.spec.Bucket {
			e = c.fromBucket(b, c.w.keys[k], work)
		} else {
			e = c.election(ctx, c.w.keys[k], work)
		}
		if e == nil {
			break
		}
		es = append(es, e)
		c.running.Go(func() { e.Start(ctx) })
	}
	c.mu.Lock()
	c.bucket, c.elections, c.cancel = b, es, cancel
	c.mu.Unlock()
	if c.spec.OnceEvery > 0 && ctx.Err() == nil {
		c.running.Go(func() { c.onceLoop(ctx, b) })
	}
	if c.w.s.Daemons > 0 && b != nil {
		c.running.Go(func() { c.joinFleet(ctx, b) })
	}
}

// options are the options of every election of the candidate.
func (c *cand) options(opts ...election.Option) []election.Option {
	opts = append(opts, election.WithoutSplay(), election.WithEventHook(c.event))
	if !c.spec.Presence {
		opts = append(opts, election.WithoutPresence())
	}
	if c.spec.Priority > 0 {
		opts = append(opts, election.WithPriority(c.spec.Priority))
	}
	if c.spec.PreferHigher {
		opts = append(opts, election.WithPreferHigher(0))
	}
	return opts
}

// openBucket opens the candidate's Bucket on its clock, retrying while its
// link is cut; nil if ctx ends first.
func (c *cand) openBucket(ctx context.Context) *election.Bucket {
	for {
		b, err := election.OpenBucket(ctx, c.kv, election.WithClock(c.clock))
		if err == nil {
			return b
		}
		if ctx.Err() != nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fromBucket makes an election of key from the candidate's Bucket; nil if
// there is none.
func (c *cand) fromBucket(b *election.Bucket, key string, opts ...election.Option) *election.Election {
	if b == nil {
		return nil
	}
	e, err := b.NewElection(name(c.i), key, c.options(opts...)...)
	if err != nil {
		panic(err) // only a closed bucket or a bad argument, neither of which the simulation makes
	}
	return e
}

// election makes one of the candidate's elections on its own, with a
// watcher of its own, retrying while its link is cut; nil if ctx ends
// first.
func (c *cand) election(ctx context.Context, key string, opts ...election.Option) *election.Election {
	opts = c.options(append(opts, election.WithClock(c.clock))...)
	for {
		e, err := election.NewElection(ctx, name(c.i), key, c.kv, opts...)
		if err == nil {
			return e
		}
		if ctx.Err() != nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// event samples IsLeader when an election announces or renews: IsLeader
// turns true only when a node announces, or when a renewal moves its
// validity deadline, so two leaders at any moment are two leaders at one
// of these.
func (c *cand) event(ev election.Event) {
	switch ev.Kind {
	case election.EventWon:
		c.w.rec.decided("%s won %s with token %d after %s", name(c.i), ev.Key, ev.Token, ev.After)
		c.w.sample(name(c.i) + " announced on " + ev.Key)
	case election.EventLost:
		c.w.rec.decided("%s lost %s (token %d): %v", name(c.i), ev.Key, ev.Token, ev.Err)
	case election.EventRenewed:
		c.w.sample(name(c.i) + " renewed " + ev.Key)
	}
}

// halt stops the candidate as its process would stop: Stop on each
// election, its Once loop cancelled, and waits for them.
func (c *cand) halt() {
	c.mu.Lock()
	es, cancel, b := c.elections, c.cancel, c.bucket
	c.elections, c.bucket = nil, nil
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range es {
		wg.Go(e.Stop)
	}
	wg.Wait()
	if cancel != nil {
		cancel()
	}
	c.running.Wait()
	c.mu.Lock()
	n := c.node
	c.node = nil
	c.mu.Unlock()
	if n != nil {
		n.Leave()
	}
	if b != nil {
		b.Close()
	}
}

// work is the candidate's OnWon on Start key k.
func (c *cand) work(ctx context.Context, k int) {
	token, _ := election.TokenFromContext(ctx)
	id := c.w.rec.begin(k, c.i, token, false)
	c.w.sample(name(c.i) + " won")
	spec := c.spec.Work[k]
	var deadline time.Time
	if spec.Stop == StopAtDeadline {
		for ctx.Err() == nil {
			if d, ok := election.WorkDeadline(ctx); ok {
				deadline = d
			}
			sleep(ctx, c.clock.Real(c.w.s.stretch(100*time.Millisecond)))
		}
	}
	<-ctx.Done()
	c.w.rec.cancel(id)
	switch spec.Stop {
	case StopAfterDelay:
		time.Sleep(c.clock.Real(spec.Delay))
	case StopAtDeadline:
		time.Sleep(c.clock.Real(deadline.Sub(c.clock.Now())))
	}
	c.w.rec.end(id)
}

// onceLoop fires the candidate's Once job every OnceEvery, on its clock,
// each time with a new election: made from the candidate's Bucket b if it
// has one (one watcher for all its keys, as a process that fires a job
// often would), else with NewElection (a watcher created and deleted per
// job, as `election run --once` does).
func (c *cand) onceLoop(ctx context.Context, b *election.Bucket) {
	key := c.w.s.StartKeys
	for c.nextOnce(ctx) {
		var e *election.Election
		if c.spec.Bucket {
			e = c.fromBucket(b, c.w.keys[key])
		} else {
			e = c.election(ctx, c.w.keys[key])
		}
		if e == nil {
			return
		}
		c.mu.Lock()
		c.once = e
		c.mu.Unlock()
		id := -1
		// a third of the jobs outlast a renewal or more; a quarter fail
		c.mu.Lock()
		length := c.w.s.ms(c.rng, 0, 300)
		if c.rng.IntN(3) == 0 {
			length = c.w.s.ms(c.rng, 1000, 5000)
		}
		fails := c.rng.IntN(4) == 0
		c.mu.Unlock()
		var opts []election.OnceOption
		if c.runLog != nil {
			opts = append(opts, election.RecordRuns(c.runLog), election.DoneFor(c.spec.DoneFor))
		}
		select {
		case <-c.jobEnd:
		default:
		}
		called := c.w.rec.now()
		out, err := e.Once(ctx, c.w.s.stretch(500*time.Millisecond), func(ctx context.Context) error {
			token, _ := election.TokenFromContext(ctx)
			id = c.w.rec.begin(key, c.i, token, true)
			c.w.sample(name(c.i) + " runs its Once job")
			if !c.job(ctx, c.clock.Real(length)) {
				c.w.rec.cancel(id)
			}
			c.w.rec.end(id)
			if fails {
				return errJobFailed
			}
			return nil
		}, opts...)
		e.Stop()
		c.mu.Lock()
		c.once = nil
		c.mu.Unlock()
		c.w.rec.decided("%s's Once on %s: %v, error %v", name(c.i), c.w.keys[key], out, err)
		c.w.rec.mu.Lock()
		c.w.rec.onces = append(c.w.rec.onces, onceResult{cand: c.i, work: id, failed: fails, outcome: out.String(), err: err, called: called, returned: c.w.rec.now()})
		c.w.rec.mu.Unlock()
	}
}

// errJobFailed is what a failing Once job returns.
var errJobFailed = errors.New("the job failed")

// nextOnce waits until the candidate fires its next Once job: OnceEvery,
// or a poke; false if ctx ends first.
func (c *cand) nextOnce(ctx context.Context) bool {
	t := time.NewTimer(c.clock.Real(c.spec.OnceEvery))
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.poke:
	case <-ctx.Done():
		return false
	}
	return true
}

// job runs a Once job for d, until jobEnd ends it early, or until ctx ends:
// false then.
func (c *cand) job(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.jobEnd:
	case <-ctx.Done():
		return false
	}
	return true
}

// sleep waits d, or until ctx ends: false then.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// sample reads IsLeader of every election of every key at one instant of
// simulated time (time stands still while this goroutine runs) and checks
// that at most one is true per key.
func (w *world) sample(why string) {
	leaders := make([][]int, len(w.keys))
	for _, c := range w.cands {
		c.mu.Lock()
		for k, e := range c.elections {
			if e.IsLeader() {
				leaders[k] = append(leaders[k], c.i)
			}
		}
		if c.once != nil && c.once.IsLeader() {
			leaders[w.s.StartKeys] = append(leaders[w.s.StartKeys], c.i)
		}
		c.mu.Unlock()
	}
	for k, l := range leaders {
		w.rec.leaders(k, l, why)
	}
}

// run plays the schedule, then checks liveness and stops the world.
func (w *world) run() {
	start := w.rec.start
	sampler := make(chan struct{})
	go func() {
		defer close(sampler)
		for sleep(w.ctx, w.s.stretch(time.Second)) {
			w.sample("tick")
		}
	}()
	var pending sync.WaitGroup
	for _, f := range w.s.Faults {
		time.Sleep(time.Until(start.Add(f.At)))
		w.sample(string(f.Class))
		w.inject(f, &pending)
	}
	time.Sleep(time.Until(start.Add(w.s.Length)))
	pending.Wait()
	for k := range w.s.StartKeys {
		found := false
		for _, c := range w.cands {
			c.mu.Lock()
			found = found || (k < len(c.elections) && c.elections[k].IsLeader())
			c.mu.Unlock()
		}
		if !found {
			w.rec.violate("liveness", "key %d has no leader %v after the last fault", k, w.s.Quiet())
		}
	}
	for d := range w.s.Daemons {
		if w.rec.running(w.s.daemonKey(d)) < 0 {
			w.rec.violate("liveness", "daemon %s runs on no node %v after the last fault", daemonName(d), w.s.Quiet())
		}
	}
	w.stop()
	<-sampler
	var wg sync.WaitGroup
	for _, c := range w.cands {
		wg.Go(c.halt)
	}
	wg.Wait()
	if w.runLog != nil {
		w.readRuns()
	}
	for _, c := range w.cands {
		c.nc.Close()
	}
	w.adminC.Close()
	w.srv.Shutdown()
	w.srv.WaitForShutdown()
}

// inject applies fault f; faults that take time run on their own
// goroutines, counted in pending.
func (w *world) inject(f Fault, pending *sync.WaitGroup) {
	c := w.cands[f.Cand]
	until := time.Now().Add(f.For)
	w.faults[f.Class]++
	switch f.Class {
	case Delete, Purge:
		w.remove(f.Key, f.Class == Purge)
	case DeleteDraining:
		pending.Go(func() { w.removeWhileDraining(f) })
	case LostAnswers:
		c.kv.set(faultLost, until)
	case LateAnswers:
		c.kv.set(faultLate, until)
	case LateWatch:
		c.kv.set(faultWatch, until)
	case Cut:
		if !f.Late {
			c.kv.set(faultCut, until)
			return
		}
		// answers late for a campaign interval, then cut: a renewal
		// answered late is the leader's last
		late := time.Now().Add(w.s.TTL * 3 / 4)
		c.kv.set(faultLate, late)
		pending.Go(func() {
			time.Sleep(time.Until(late))
			c.kv.set(faultCut, time.Now().Add(f.For))
		})
	case Suspend:
		now := w.rec.now()
		w.rec.suspended(c.i, now, now+f.For+3*w.s.TTL)
		// The link comes back resumeFirst after the clock resumes: a
		// resumed machine reads its clocks before anything it receives
		// runs, so the candidate sees the suspend before any watched entry
		// or answer can reach it.
		c.clock.Suspend()
		c.kv.set(faultCut, until.Add(resumeFirst))
		pending.Go(func() {
			time.Sleep(f.For)
			c.clock.Resume(f.Leap)
		})
	case LateRenewal:
		pending.Go(func() { w.lateRenewal(f) })
	case LostBeforeDone:
		w.lostBeforeDone(f)
	case Drop:
		w.drop(c.nc)
	case DropAll:
		for _, c := range w.cands {
			w.drop(c.nc)
		}
		w.drop(w.adminC)
	case Resign, Transfer:
		pending.Go(func() { w.request(f) })
	case Restart:
		c.mu.Lock()
		busy := c.restarting
		c.restarting = true
		c.mu.Unlock()
		if busy {
			return
		}
		pending.Go(func() {
			c.halt()
			time.Sleep(f.For)
			c.start()
			c.mu.Lock()
			c.restarting = false
			c.mu.Unlock()
		})
	}
}

// request plays a Resign or Transfer: the asking candidate's Bucket asks
// the leader of the key, and the outcome goes on the timeline.
func (w *world) request(f Fault) {
	c := w.cands[f.Cand]
	c.mu.Lock()
	b := c.bucket
	c.mu.Unlock()
	if b == nil {
		return // the candidate is restarting
	}
	ctx, cancel := context.WithTimeout(w.ctx, 3*w.s.TTL)
	defer cancel()
	key := w.keys[f.Key]
	if f.Class == Transfer {
		l, err := b.Transfer(ctx, key, name(f.To))
		w.rec.decided("%s's transfer of %s to %s: %s leads, error %v", name(c.i), key, name(f.To), l.Name, err)
		return
	}
	l, err := b.Resign(ctx, key)
	w.rec.decided("%s's resignation request on %s: %s leads, error %v", name(c.i), key, l.Name, err)
}

// remove deletes or purges key k as another client.
func (w *world) remove(k int, purge bool) {
	ctx, cancel := context.WithTimeout(w.ctx, w.s.stretch(5*time.Second))
	defer cancel()
	var err error
	if purge {
		err = w.admin.Purge(ctx, w.keys[k])
	} else {
		err = w.admin.Delete(ctx, w.keys[k])
	}
	if err == nil {
		w.rec.removed(k)
	}
}

// removeWhileDraining cuts the key's leader off, so that its leadership
// ends while its work runs, and removes the key once that work drains (or
// has just returned); if no work drains within three TTLs, it does not.
func (w *world) removeWhileDraining(f Fault) {
	if c := w.leader(f.Key); c != nil {
		c.kv.set(faultCut, time.Now().Add(w.s.TTL+w.s.TTL/2))
	}
	for end := time.Now().Add(3 * w.s.TTL); time.Now().Before(end); time.Sleep(w.s.stretch(5 * time.Millisecond)) {
		if w.rec.draining(f.Key) {
			w.remove(f.Key, f.Purge)
			return
		}
	}
}

// lateRenewal plays a LateRenewal fault: it sets a trap for the key's
// leader's next renewal; or, after a removal, for each candidate's next
// renewal sent with at least a fifth of a TTL before its deadline: only a
// winner confirming its claim before it announces sends one so early.
func (w *world) lateRenewal(f Fault) {
	t := trap{key: w.keys[f.Key], frac: f.Frac, cutFor: f.For, until: time.Now().Add(w.s.TTL)}
	if !f.Removal {
		if c := w.leader(f.Key); c != nil {
			c.kv.setTrap(&t)
		}
		return
	}
	t.minLeft, t.until = w.s.TTL/5, time.Now().Add(5*w.s.TTL)
	for _, c := range w.cands {
		c.kv.setTrap(&t)
	}
	w.removeWhileDraining(f)
}

// lostBeforeDone plays a LostBeforeDone fault: a trap for each candidate's
// next renewal of the Once key, whose answer is lost; when it springs, that
// candidate's job returns, and the others fire their jobs f.For later.
func (w *world) lostBeforeDone(f Fault) {
	key := w.s.StartKeys
	for _, c := range w.cands {
		c.kv.setTrap(&trap{key: w.keys[key], lost: true, until: time.Now().Add(w.s.stretch(10 * time.Second)), fired: func() {
			select {
			case c.jobEnd <- struct{}{}:
			default:
			}
			go func() {
				if !sleep(w.ctx, f.For) {
					return
				}
				for _, o := range w.cands {
					if o != c {
						select {
						case o.poke <- struct{}{}:
						default:
						}
					}
				}
			}()
		}})
	}
}

// leader is the candidate whose election of key k leads now, if any; for
// a daemon's key, the candidate whose node runs it.
func (w *world) leader(k int) *cand {
	if k > w.s.StartKeys {
		if i := w.rec.running(k); i >= 0 {
			return w.cands[i]
		}
		return nil
	}
	for _, c := range w.cands {
		c.mu.Lock()
		var e *election.Election
		if k < len(c.elections) {
			e = c.elections[k]
		} else if k == w.s.StartKeys {
			e = c.once
		}
		leads := e != nil && e.IsLeader()
		c.mu.Unlock()
		if leads {
			return c
		}
	}
	return nil
}

// readRuns reads the outcomes of the Once runs from the run log, for the
// checks; a log that cannot be read is a violation.
func (w *world) readRuns() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := w.runLog.Events(ctx, w.keys[w.s.StartKeys], time.Time{})
	if err != nil {
		w.rec.violate("run log", "reading the Once runs: %v", err)
		return
	}
	for _, ev := range evs {
		if ev.Kind != ehistory.Ran {
			continue
		}
		var i int
		if _, err := fmt.Sscanf(ev.Name, "c%d", &i); err != nil {
			continue
		}
		run := ev.Run()
		w.rec.mu.Lock()
		w.rec.runs = append(w.rec.runs, runRecord{cand: i, token: ev.Token, stored: ev.Recorded.Sub(w.rec.start), doneFor: ev.DoneFor, failed: !run.Succeeded()})
		w.rec.mu.Unlock()
	}
}
