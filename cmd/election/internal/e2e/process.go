package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvelect/election/internal/testenv"
	"github.com/kvelect/election/internal/topology"
)

// Process is an election process of a test, its output logged to a file.
type Process struct {
	Cmd  *exec.Cmd     // the process, started
	Log  string        // the file of its stderr and its command's output
	done chan struct{} // closed when it has exited
	code int           // its exit code, once done
}

// StartDaemon starts bin run with args, and kills it when the test ends if
// it still runs.
func StartDaemon(t *testing.T, bin, name string, args ...string) *Process {
	t.Helper()
	return StartProcess(t, bin, name, append([]string{"run", "--name", name, "--log-format", "json"}, args...)...)
}

// StartProcess starts bin with args, its output logged to a file named
// after name, and kills it when the test ends if it still runs.
func StartProcess(t *testing.T, bin, name string, args ...string) *Process {
	t.Helper()
	p := PrepareProcess(t, bin, name, args...)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// PrepareProcess is StartProcess without the start, for tests that start
// several processes at one instant (Start may run on any goroutine).
func PrepareProcess(t *testing.T, bin, name string, args ...string) *Process {
	t.Helper()
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{Cmd: exec.Command(bin, args...), Log: logFile.Name(), done: make(chan struct{})}
	p.Cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+dir, "NATS_URL=", "NATS_CONTEXT=")
	p.Cmd.Stdout, p.Cmd.Stderr = logFile, logFile
	t.Cleanup(func() {
		logFile.Close()
		if p.Cmd.Process != nil {
			p.Cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Start starts a prepared process.
func (p *Process) Start() error {
	if err := p.Cmd.Start(); err != nil {
		return err
	}
	go func() {
		p.Cmd.Wait()
		p.code = p.Cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	return nil
}

// Wait waits for the process to exit and returns its exit code.
func (p *Process) Wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(WaitTimeout):
		t.Fatalf("election run still runs after %v", WaitTimeout)
		return 0
	}
}

// Logged returns what the process has logged so far.
func (p *Process) Logged(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Watched is a run of the election binary whose output a test reads line
// by line, as it comes.
type Watched struct {
	Cmd    *exec.Cmd   // the command, started
	what   string      // the command, as failures name it
	lines  chan string // closed at the end of the output
	stderr strings.Builder
}

// StartWatched starts bin with args in an environment of its own (no NATS
// context or configuration of the user's) and reads its output line by
// line; what names the command in failures. The command is killed at the
// end of the test if it still runs.
func StartWatched(t *testing.T, what, bin string, args ...string) *Watched {
	t.Helper()
	w := &Watched{what: what, Cmd: exec.Command(bin, args...), lines: make(chan string, 100)}
	w.Cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "NATS_URL=", "NATS_CONTEXT=")
	stdout, err := w.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Cmd.Stderr = &w.stderr
	if err := w.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Cmd.Process.Kill()
		w.Cmd.Wait()
	})
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	return w
}

// Next returns the command's next line, failing the test if its output
// ended or no line came within WaitTimeout.
func (w *Watched) Next(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-w.lines:
		if !ok {
			t.Fatalf("%s ended its output; stderr %q", w.what, w.stderr.String())
		}
		return line
	case <-time.After(WaitTimeout):
		t.Fatalf("no line from %s after %v", w.what, WaitTimeout)
	}
	return ""
}

// Interrupt sends the command SIGINT, reads its output to the end and
// returns how it exited: nil for status 0.
func (w *Watched) Interrupt() error {
	w.Cmd.Process.Signal(syscall.SIGINT)
	for range w.lines {
	}
	return w.Cmd.Wait()
}

// Get returns the status and body of a GET of url, on a connection of its
// own: none is left open for the leak check.
func Get(url string) (int, string, error) {
	client := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// Started is one start of a recording command, as the command itself
// recorded it (see RecordingCommand).
type Started struct {
	Name, Key, Bucket string // KVELECT_LEADER, KVELECT_KEY and KVELECT_BUCKET
	Token             uint64 // KVELECT_TOKEN
	PID               int    // the command's process
}

// RecordingCommand returns the arguments of a command that appends its
// start to file and then runs until it is stopped.
func RecordingCommand(file string) []string {
	return []string{"sh", "-c", `echo "$KVELECT_LEADER $KVELECT_TOKEN $$ $KVELECT_KEY $KVELECT_BUCKET" >> ` + file + `; exec sleep 1000`}
}

// WaitStarts polls file until it records n starts and returns them.
func WaitStarts(t *testing.T, file string, n int) []Started {
	t.Helper()
	var starts []Started
	testenv.Poll(t, fmt.Sprintf("%d starts of the command", n), WaitTimeout, func() (string, bool) {
		data, _ := os.ReadFile(file)
		starts = ParseStarts(data)
		return fmt.Sprintf("%q", data), len(starts) >= n
	})
	return starts
}

// ParseStarts returns the starts recorded in data.
func ParseStarts(data []byte) []Started {
	var starts []Started
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var s Started
		if _, err := fmt.Sscan(line, &s.Name, &s.Token, &s.PID, &s.Key, &s.Bucket); err == nil {
			starts = append(starts, s)
		}
	}
	return starts
}

// WaitDead waits until process pid has gone.
func WaitDead(t *testing.T, pid int) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("process %d to exit", pid), WaitTimeout, func() bool { return !testenv.Alive(pid) })
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitCode is the process's exit code, once Done is closed.
func (p *Process) ExitCode() int { return p.code }

// Stderr is what the command has written on its standard error so far.
func (w *Watched) Stderr() string { return w.stderr.String() }

// StartNATSServers starts every server of topo as a standalone nats-server
// process, built from the module this one requires and configured with a
// file (topology.Binary), its log in a file of the test's; each is killed
// when the test ends if it still runs. It returns the processes by server
// name once every server takes clients and they have formed.
func StartNATSServers(t *testing.T, topo *topology.Topology) map[string]*topology.Process {
	t.Helper()
	bin := BuildOnce(t, "nats-server", "github.com/nats-io/nats-server/v2")
	logs := t.TempDir()
	servers := map[string]*topology.Process{}
	for _, s := range topo.Servers {
		log, err := os.Create(filepath.Join(logs, "nats-server-"+s.Name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		p := topology.NewProcess(s, topology.Binary(bin), log)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.Kill()
			log.Close()
		})
		servers[s.Name] = p
	}
	// Three servers' gateways and a meta leader elected across them: on a
	// machine busy with the other packages' tests this took over 30 s once.
	if err := topo.AwaitFormed(context.Background(), 2*WaitTimeout); err != nil {
		t.Fatal(err)
	}
	return servers
}
