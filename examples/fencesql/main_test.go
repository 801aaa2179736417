package fencesql_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/kvelect/election/internal/embedded"
	"github.com/kvelect/election/internal/testenv"
)

// pool connects to the PostgreSQL server TestMain started; natsURL is the
// embedded NATS server's, for the examples.
var (
	pool    *pgxpool.Pool
	natsURL string
)

// TestMain starts a PostgreSQL server of its own (Debian's postgresql
// package) in a temporary directory, listening on a Unix socket only, runs
// the tests and examples against it, and stops it. Without PostgreSQL's
// binaries it runs nothing and says so.
func TestMain(m *testing.M) {
	bin, err := postgresBin()
	if err != nil {
		fmt.Printf("SKIP: every test and example of fencesql: %v; install Debian's postgresql package (apt-get install postgresql)\n", err)
		os.Exit(0)
	}
	stop, err := startPostgres(bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting PostgreSQL:", err)
		os.Exit(1)
	}
	natsDir, err := os.MkdirTemp("", "fencesql-nats-")
	if err != nil {
		stop()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ns, err := embedded.Server(natsDir)
	if err != nil {
		stop()
		fmt.Fprintln(os.Stderr, "starting NATS:", err)
		os.Exit(1)
	}
	natsURL = ns.ClientURL()
	testenv.VerifyNoLeaks(m, stop, func() {
		embedded.Shutdown(ns)
		os.RemoveAll(natsDir)
	})
}

// postgresBin returns the directory of PostgreSQL's server binaries: where
// initdb is in PATH, else the newest /usr/lib/postgresql/*/bin (Debian puts
// them there, outside PATH).
func postgresBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(real), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL binaries (initdb, postgres) in PATH or /usr/lib/postgresql/*/bin")
}

func version(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return v
}

// startPostgres initialises a cluster in a temporary directory and starts
// postgres on a Unix socket there, as the postgres user when run as root
// (PostgreSQL refuses to run as root). It returns once the server says it
// accepts connections, with pool connected, and a func that stops it and
// removes the directory.
func startPostgres(bin string) (stop func(), err error) {
	dir, err := os.MkdirTemp("", "fencesql-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	// As root, the commands run as the postgres user (PostgreSQL refuses
	// root), started straight under that user's ids so that signals reach
	// postgres itself.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs the postgres user (Debian's postgresql package makes it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			cmd.Env = append(os.Environ(), "HOME="+dir, "USER=postgres")
		}
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := command("initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	server := command("postgres", "-D", data, "-k", dir, "-c", "listen_addresses=", "-c", "fsync=off", "-c", "full_page_writes=off")
	stderr, err := server.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := server.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	ready := make(chan struct{})
	var log strings.Builder
	go func() {
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			if log.Len() < 1<<16 {
				log.WriteString(lines.Text() + "\n")
			}
			if strings.Contains(lines.Text(), "database system is ready to accept connections") {
				close(ready)
				io.Copy(io.Discard, stderr)
				break
			}
		}
		exited <- server.Wait()
	}()
	stop = func() {
		if pool != nil {
			pool.Close()
		}
		server.Process.Signal(syscall.SIGINT) // fast shutdown
		<-exited
		os.RemoveAll(dir)
	}
	select {
	case <-ready:
	case err := <-exited:
		return nil, fmt.Errorf("postgres exited (%v):\n%s", err, log.String())
	case <-time.After(60 * time.Second):
		stop()
		return nil, fmt.Errorf("postgres not ready after 60 s:\n%s", log.String())
	}
	pool, err = pgxpool.New(context.Background(), fmt.Sprintf("host=%s user=postgres dbname=postgres pool_max_conns=16", dir))
	if err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}
