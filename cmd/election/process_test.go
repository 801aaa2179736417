package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The end-to-end tests' processes: election commands run as a user runs
// them, their output read as it comes or from a log file.

// daemon is an election run process.
type daemon struct {
	cmd  *exec.Cmd
	log  string        // its stderr and its command's output
	done chan struct{} // closed when it has exited
	code int           // its exit code, once done
}

// startDaemon starts bin run with args, and kills it when the test ends if
// it still runs.
func startDaemon(t *testing.T, bin, name string, args ...string) *daemon {
	t.Helper()
	return startProcess(t, bin, name, append([]string{"run", "--name", name, "--log-format", "json"}, args...)...)
}

// startProcess starts bin with args, its output logged to a file named
// after name, and kills it when the test ends if it still runs.
func startProcess(t *testing.T, bin, name string, args ...string) *daemon {
	t.Helper()
	d := prepareProcess(t, bin, name, args...)
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	return d
}

// prepareProcess is startProcess without the start, for tests that start
// several processes at one instant (start may run on any goroutine).
func prepareProcess(t *testing.T, bin, name string, args ...string) *daemon {
	t.Helper()
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: exec.Command(bin, args...), log: logFile.Name(), done: make(chan struct{})}
	d.cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+dir, "NATS_URL=", "NATS_CONTEXT=")
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	t.Cleanup(func() {
		logFile.Close()
		if d.cmd.Process != nil {
			d.cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

// start starts a prepared process.
func (d *daemon) start() error {
	if err := d.cmd.Start(); err != nil {
		return err
	}
	go func() {
		d.cmd.Wait()
		d.code = d.cmd.ProcessState.ExitCode()
		close(d.done)
	}()
	return nil
}

// wait waits for the daemon to exit and returns its exit code.
func (d *daemon) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-d.done:
		return d.code
	case <-time.After(waitTimeout):
		t.Fatalf("election run still runs after %v", waitTimeout)
		return 0
	}
}

func (d *daemon) logged(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(d.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// watchedCommand is a run of the election binary whose output a test reads
// line by line, as it comes.
type watchedCommand struct {
	what   string // the command, as failures name it
	cmd    *exec.Cmd
	lines  chan string // closed at the end of the output
	stderr strings.Builder
}

// startWatched starts bin with args in an environment of its own (no NATS
// context or configuration of the user's) and reads its output line by
// line; what names the command in failures. The command is killed at the
// end of the test if it still runs.
func startWatched(t *testing.T, what, bin string, args ...string) *watchedCommand {
	t.Helper()
	w := &watchedCommand{what: what, cmd: exec.Command(bin, args...), lines: make(chan string, 100)}
	w.cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "NATS_URL=", "NATS_CONTEXT=")
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.cmd.Stderr = &w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.cmd.Process.Kill()
		w.cmd.Wait()
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

// next returns the command's next line, failing the test if its output
// ended or no line came within pollTimeout.
func (w *watchedCommand) next(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-w.lines:
		if !ok {
			t.Fatalf("%s ended its output; stderr %q", w.what, w.stderr.String())
		}
		return line
	case <-time.After(pollTimeout):
		t.Fatalf("no line from %s after %v", w.what, pollTimeout)
	}
	return ""
}

// interrupt sends the command SIGINT, reads its output to the end and
// returns how it exited: nil for status 0.
func (w *watchedCommand) interrupt() error {
	w.cmd.Process.Signal(syscall.SIGINT)
	for range w.lines {
	}
	return w.cmd.Wait()
}

// get returns the status and body of a GET of url, on a connection of its
// own: none is left open for the leak check.
func get(url string) (int, string, error) {
	client := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
