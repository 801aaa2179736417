package topology

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kvelect/election/internal/embedded"
)

// readyTimeout bounds how long a server process may take to take clients:
// longer than its embedded server waits, so that a child that fails says why.
const readyTimeout = 60 * time.Second

// serverEnv holds, for a child process started with Self, the JSON of the
// Server it runs.
const serverEnv = "KVELECT_TOPOLOGY_SERVER"

// Command is how a Process runs its server.
type Command struct {
	binary string // a nats-server executable; "" for this executable (Self)
}

// Self runs a server in this executable again, which must call ServeIfAsked
// before anything else (a test binary: first in TestMain). A test can then
// SIGKILL or SIGSTOP a server, which an embedded one does not allow.
func Self() Command { return Command{} }

// Binary runs a server as the nats-server executable at path, configured
// with a file (Server.Config) next to its store, as a user runs one.
func Binary(path string) Command { return Command{binary: path} }

// Process is a server running in a child process. It can be killed and
// started again, on the same ports and store.
type Process struct {
	Server *Server
	run    Command
	out    io.Writer
	cmd    *exec.Cmd
	stdin  io.Closer // held open: a child started with Self ends when it closes
	done   chan struct{}
}

// NewProcess returns the process that runs s as run says, its output
// (nats-server's log; a Self child's errors) copied to out. It does not
// start it.
func NewProcess(s *Server, run Command, out io.Writer) *Process {
	return &Process{Server: s, run: run, out: out}
}

// Start starts the process, or starts it again once it has exited, and
// returns once the server takes clients.
func (p *Process) Start() error {
	cmd, ready, err := p.command()
	if err != nil {
		return err
	}
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if cmd.Stderr == nil {
		cmd.Stderr = cmd.Stdout
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd, p.stdin, p.done = cmd, stdin, make(chan struct{})
	isReady := make(chan bool, 1)
	go func() {
		r := bufio.NewReader(pipe)
		found := false
		for !found {
			line, err := r.ReadString('\n')
			if p.run.binary != "" {
				io.WriteString(p.out, line)
			}
			if err != nil {
				break
			}
			found = ready(strings.TrimSuffix(line, "\n"))
		}
		isReady <- found
		io.Copy(p.out, r)
		cmd.Wait()
		close(p.done)
	}()
	select {
	case ok := <-isReady:
		if !ok {
			return fmt.Errorf("server %s exited before it took clients", p.Server.Name)
		}
		return nil
	case <-time.After(readyTimeout):
		p.Kill()
		return fmt.Errorf("server %s took no clients within %v", p.Server.Name, readyTimeout)
	}
}

// command returns the command that runs the server, and what tells, in a
// line of its output, that the server takes clients.
func (p *Process) command() (*exec.Cmd, func(string) bool, error) {
	if p.run.binary != "" {
		file := p.Server.StoreDir + ".conf"
		if err := os.WriteFile(file, []byte(p.Server.Config()), 0o600); err != nil {
			return nil, nil, err
		}
		ready := func(line string) bool { return strings.Contains(line, "Server is ready") }
		return exec.Command(p.run.binary, "-c", file), ready, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	spec, err := json.Marshal(p.Server)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), serverEnv+"="+string(spec))
	cmd.Stderr = p.out
	return cmd, func(line string) bool { return line == "ready" }, nil
}

// Pid returns the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process (SIGSTOP and SIGCONT pause and resume it).
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Done returns a channel closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill SIGKILLs the process and waits until it has exited.
func (p *Process) Kill() {
	p.cmd.Process.Signal(os.Kill)
	p.wait()
}

// Stop asks the process to shut down (SIGTERM) and waits until it has; it
// does nothing if it never started or has exited.
func (p *Process) Stop() {
	if p.cmd == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait()
}

func (p *Process) wait() {
	<-p.done
	p.stdin.Close()
}

// ServeIfAsked runs the server a parent process asked for with Self, if it
// did, until it gets SIGTERM or its standard input closes (the parent has
// ended), and exits; otherwise it returns at once.
func ServeIfAsked() {
	spec := os.Getenv(serverEnv)
	if spec == "" {
		return
	}
	if err := serve(spec); err != nil {
		fmt.Fprintln(os.Stderr, "topology server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serve(spec string) error {
	var s Server
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return err
	}
	srv, err := s.StartEmbedded()
	if err != nil {
		return err
	}
	fmt.Println("ready")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	closed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(closed)
	}()
	select {
	case <-stop:
	case <-closed:
	}
	embedded.Shutdown(srv)
	return nil
}
