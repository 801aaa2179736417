//go:build unix

package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kvelect/election/cmd/chaos/record"
	"github.com/kvelect/election/cmd/chaos/worker"
)

// daemonShapes are the commands of an -agents run's daemons, one per
// daemon in turn, each starting the actor from the chaos binary the agent
// has in its environment (worker.ActorBinEnv). The agent runs each as sh -c
// COMMAND, and /bin/sh forks for all of them (dash does not exec a -c
// string's last command): the actor is a grandchild of the agent's guard
// or deeper, beside a shell, a cat or a second shell in the group, as in
// real daemons' scripts.
var daemonShapes = []string{
	`"$CHAOS_BIN" actor & wait`,
	`"$CHAOS_BIN" actor | cat`,
	`sh -c '"$CHAOS_BIN" actor; true'`,
	`"$CHAOS_BIN" actor`,
}

// agentGrace is the agents' --grace: an actor exits at once on SIGTERM,
// and a shell that SIGTERM ends leaves the rest to the guard.
const agentGrace = 2 * time.Second

// joinedMessage is what an agent logs once it has joined the fleet (the
// fleet's log line, then the agent's own).
const joinedMessage = "joined the fleet"

// actorExitWait is how long the harness waits, once every agent has
// exited, for the last actors' connections to close: the kernel closes a
// dead process's socket at once, so only reading the last records takes
// time. An actor still connected after it outlived its agent.
const actorExitWait = time.Second

// actorProc is one actor process, as its start record describes it.
type actorProc struct {
	node   string
	daemon string
	pid    int
	token  uint64
}

// prepareAgents gets the election binary (built into the run's directory
// unless -election names one) and listens for the actors' records.
func (h *Harness) prepareAgents() error {
	if h.cfg.Election != "" {
		path, err := filepath.Abs(h.cfg.Election)
		if err != nil {
			return err
		}
		h.agentBin = path
	} else {
		h.agentBin = filepath.Join(h.dir, "election")
		build := exec.Command("go", "build", "-o", h.agentBin, "github.com/kvelect/election/cmd/election")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building the election binary (run from the module, or give -election): %w", err)
		}
	}
	ln, err := net.Listen("unix", filepath.Join(h.dir, "actors.sock"))
	if err != nil {
		return err
	}
	h.actorLn = ln
	go h.acceptActors()
	return nil
}

// spawnAgent starts w as an election agent connected through the proxies
// at urls, able to run every daemon, each under its shape of command.
func (h *Harness) spawnAgent(w *Worker, urls string) error {
	args := []string{"agent", "--server", urls, "--bucket", worker.BucketName, "--name", w.name,
		"--grace", agentGrace.String(), "--log-format", "json"}
	for i, d := range h.cfg.DaemonNames() {
		args = append(args, "--daemon", d+"="+daemonShapes[i%len(daemonShapes)])
	}
	cmd := exec.Command(h.agentBin, args...)
	cmd.Env = append(os.Environ(), worker.ActorBinEnv+"="+h.self, worker.ActorURLsEnv+"="+urls,
		worker.ActorSocketEnv+"="+h.actorLn.Addr().String())
	// The log goes through a pipe the harness reads to learn when the
	// agent joined. The daemons inherit it, so its end does not tell the
	// agent's exit: Wait does.
	logR, logW, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logW, logW
	log, err := os.Create(filepath.Join(h.dir, "agent-"+w.name+".log"))
	if err == nil {
		if err = cmd.Start(); err != nil {
			log.Close()
		}
	}
	logW.Close()
	if err != nil {
		logR.Close()
		return err
	}
	w.cmd = cmd
	h.mu.Lock()
	h.workers[w.name] = w
	h.mu.Unlock()
	h.rec.Record(record.Event{Kind: "spawn", Target: w.name, PID: cmd.Process.Pid})
	go h.followAgentLog(w, logR, log)
	go func() {
		cmd.Wait()
		h.exited(w)
	}()
	return nil
}

// followAgentLog copies an agent's log to its file and marks the agent
// joined when it says so.
func (h *Harness) followAgentLog(w *Worker, r io.ReadCloser, log io.WriteCloser) {
	defer r.Close()
	defer log.Close()
	lines := bufio.NewReader(r)
	joined := false
	for {
		line, err := lines.ReadBytes('\n')
		log.Write(line)
		var entry struct {
			Msg string `json:"msg"`
		}
		if !joined && json.Unmarshal(line, &entry) == nil && entry.Msg == joinedMessage {
			joined = true
			h.mu.Lock()
			w.joined = true
			h.mu.Unlock()
			h.rec.Record(record.Event{Kind: "joined", Target: w.name})
			h.signal()
		}
		if err != nil {
			return
		}
	}
}

// acceptActors takes the actors' connections until the listener closes.
func (h *Harness) acceptActors() {
	for {
		conn, err := h.actorLn.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		h.actorConns++
		seq := h.nextActor
		h.nextActor++
		h.mu.Unlock()
		go h.followActor(conn, seq)
	}
}

// followActor copies one actor's records to its own file and tracks who
// runs each daemon: an actor's start makes its node the daemon's holder,
// one of its acts accepted since the last fault settles it, and the end
// of its connection (the actor exited) ends its hold.
func (h *Harness) followActor(conn net.Conn, seq int) {
	var a *actorProc
	defer func() {
		conn.Close()
		h.mu.Lock()
		h.actorConns--
		if a != nil {
			delete(h.actors, a)
			if h.holderActor[a.daemon] == a {
				delete(h.holderActor, a.daemon)
				delete(h.holders, a.daemon)
			}
		}
		h.mu.Unlock()
		if a != nil {
			h.rec.Record(record.Event{Kind: "actor-gone", Target: a.node, Daemon: a.daemon, PID: a.pid, Token: a.token})
		}
		h.signal()
	}()
	out, err := os.Create(filepath.Join(h.dir, fmt.Sprintf("actor-%04d.jsonl", seq)))
	if err != nil {
		return
	}
	defer out.Close()
	lines := bufio.NewScanner(conn)
	lines.Buffer(make([]byte, 64*1024), 1024*1024)
	for lines.Scan() {
		line := lines.Bytes()
		out.Write(append(line, '\n'))
		var ev record.Event
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		h.mu.Lock()
		switch {
		case ev.Kind == "start" && a == nil:
			a = &actorProc{node: ev.Worker, daemon: ev.Daemon, pid: ev.PID, token: ev.Token}
			h.actors[a] = true
			h.holders[a.daemon], h.holderActor[a.daemon], h.settled[a.daemon] = a.node, a, false
			select {
			case h.wins <- ev:
			default: // wins are waiting already
			}
		case ev.Kind == "act" && ev.Accepted && a != nil && h.holderActor[a.daemon] == a && ev.Sent > h.settledFrom:
			h.settled[a.daemon] = true
		}
		h.mu.Unlock()
		h.signal()
	}
}

// endAgents, once every agent has exited, ends the actors (endActors) and
// removes the election binary if the run built it.
func (h *Harness) endAgents() {
	h.endActors()
	if h.cfg.Election == "" && h.agentBin != "" {
		os.Remove(h.agentBin)
	}
}

// endActors, once every agent has exited, waits for the actors'
// connections to close. An actor still connected after actorExitWait
// outlived its agent: it is recorded as left over and killed. Its open
// connection proves that its process has not exited, so the ID is still
// its own.
func (h *Harness) endActors() {
	if h.actorLn == nil {
		return
	}
	h.actorLn.Close()
	if h.awaitActors(actorExitWait) {
		return
	}
	h.mu.Lock()
	for a := range h.actors {
		h.rec.Record(record.Event{Kind: "leftover", Target: a.node, Daemon: a.daemon, PID: a.pid, Token: a.token})
		syscall.Kill(a.pid, syscall.SIGKILL)
	}
	h.mu.Unlock()
	if !h.awaitActors(worker.StartTimeout) {
		h.rec.Record(record.Event{Kind: "leftover-error", Err: "actors still connected after they were killed"})
	}
}

// awaitActors waits up to d until no actor is connected, and reports
// whether none is.
func (h *Harness) awaitActors(d time.Duration) bool {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		h.mu.Lock()
		open := h.actorConns
		h.mu.Unlock()
		if open == 0 {
			return true
		}
		select {
		case <-h.changed:
		case <-timeout.C:
			return false
		}
	}
}
