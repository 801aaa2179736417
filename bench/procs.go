package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// closeTimeout bounds how long a candidate process may take to close its
// candidate and exit once its stdin ends. After that it is killed.
const closeTimeout = 10 * time.Second

// procSystem is a system whose candidates each run in a child process
// (-procs), while its server, and the candidates' fault proxies, stay in
// this process. See child.go for the child's side.
type procSystem struct {
	system
	self string // this binary
	ttl  time.Duration
}

// newCandidate starts the child process and returns once it has connected.
func (s procSystem) newCandidate(addr, election string, id int, events chan<- event) (candidate, error) {
	cmd := exec.Command(s.self, candidateCommand, "-system", s.name(), "-ttl", s.ttl.String(),
		"-addr", addr, "-election", election, "-id", strconv.Itoa(id))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting candidate process: %w", err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "ready" {
		err := fmt.Errorf("candidate process %d exited before it was ready", id)
		if ev, ok := parseEvent(sc.Text()); ok && ev.err != nil {
			err = fmt.Errorf("candidate process %d: %w", id, ev.err)
		}
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	p := &procCandidate{id: id, cmd: cmd, stdin: stdin, replies: make(chan string, 1), exited: make(chan struct{})}
	go p.read(sc, events)
	return p, nil
}

// procCandidate is a candidate in a child process, driven over its stdin
// and stdout.
type procCandidate struct {
	id      int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan string   // the child's answers to resign
	exited  chan struct{} // closed once the child's stdout has ended
}

// read passes the child's events on, as this process's times, and its
// answers to replies, until its stdout ends.
func (p *procCandidate) read(sc *bufio.Scanner, events chan<- event) {
	defer close(p.exited)
	for sc.Scan() {
		if ev, ok := parseEvent(sc.Text()); ok {
			ev.id = p.id
			events <- ev
			continue
		}
		// Only one command at a time awaits an answer: drop a line that
		// none does rather than block.
		select {
		case p.replies <- sc.Text():
		default:
		}
	}
}

func (p *procCandidate) send(cmd string) { io.WriteString(p.stdin, cmd+"\n") }

// ask sends cmd and returns the child's answer, or "" if it exited first.
func (p *procCandidate) ask(cmd string) string {
	p.send(cmd)
	select {
	case r := <-p.replies:
		return r
	case <-p.exited:
		return ""
	}
}

func (p *procCandidate) campaign() { p.send("campaign") }

func (p *procCandidate) resign() { p.ask("resign") }

// close ends the child's stdin, on which it closes its candidate and exits,
// and reaps it; one that has not exited after closeTimeout is killed.
func (p *procCandidate) close() {
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(closeTimeout):
		p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd.Wait()
}
