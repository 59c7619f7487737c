// Package faults runs flash sales while it breaks the product's dependencies: it kills the
// worker, restarts Redis (which keeps nothing), stops Postgres, and cuts the API off from
// Temporal. After each fault it checks the promises to the shop from Postgres, Redis and
// Temporal: nothing oversold, no paid order lost, no unit left held by an ended checkout.
//
// The suite starts its own Redis, Postgres cluster (initdb into a temporary folder, run as
// the postgres user when the test runs as root) and Temporal dev server (file-backed) on spare
// loopback ports, so stopping them never disturbs the machine's services or other tests. The
// worker runs as a separate process built from cmd/checkout, so it can be SIGKILLed; the API
// runs in the test binary behind its own TCP proxy to Temporal, and as two processes of its
// own for the replica fault (replicas_test.go).
package faults

import (
	"context"
	"errors"
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

	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// waitFor polls cond every 50 ms until it returns nil or the deadline passes.
func waitFor(within time.Duration, cond func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startLogged starts cmd with its output appended to the file at logPath and returns a
// channel closed when the process has exited.
func startLogged(t testing.TB, cmd *exec.Cmd, logPath, what string) chan struct{} {
	t.Helper()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		t.Fatalf("start %s: %v", what, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(exited) }()
	return exited
}

// stopProcess sends sig and gives the process grace to exit before it is killed.
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}, sig os.Signal, grace time.Duration) {
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// tail returns the last n bytes of a log file, for failure messages.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, _ := f.Stat()
	if st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// redisServer is a redis-server of the suite's own, without persistence like the machine's.
type redisServer struct {
	t    testing.TB
	port string
	dir  string
	cmd  *exec.Cmd
}

func startRedis(t testing.TB, dir string) *redisServer {
	r := &redisServer{t: t, port: testenv.FreePort(t), dir: dir}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) url() string { return "redis://127.0.0.1:" + r.port + "/0" }

func (r *redisServer) start() {
	r.t.Helper()
	logPath := filepath.Join(r.dir, "redis.log")
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", r.port, "--save", "",
		"--appendonly", "no", "--dir", r.dir, "--daemonize", "no", "--logfile", logPath)
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server (is it installed?): %v", err)
	}
	r.cmd = cmd
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + r.port})
	defer rdb.Close()
	if err := waitFor(10*time.Second, func() error { return rdb.Ping(context.Background()).Err() }); err != nil {
		r.t.Fatalf("redis-server on %s did not answer: %v\n%s", r.port, err, tail(logPath, 2000))
	}
}

// kill stops Redis with SIGKILL: everything it held is gone.
func (r *redisServer) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// postgresCluster is a Postgres cluster in a temporary folder, on its own port.
type postgresCluster struct {
	t    testing.TB
	bin  string
	dir  string
	port string
}

// pgBin finds the Postgres server binaries: PG_BIN, the newest /usr/lib/postgresql/*/bin,
// or pg_ctl on PATH.
func pgBin(t testing.TB) string {
	if p := os.Getenv("PG_BIN"); p != "" {
		return p
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi < vj
	})
	if len(dirs) > 0 {
		return dirs[len(dirs)-1]
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p)
	}
	t.Fatal("no Postgres server binaries (initdb, pg_ctl): install PostgreSQL or set PG_BIN")
	return ""
}

func startPostgres(t testing.TB) *postgresCluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "faults-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p := &postgresCluster{t: t, bin: pgBin(t), dir: dir, port: testenv.FreePort(t)}
	t.Cleanup(func() {
		p.stop()
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root: the cluster belongs to postgres.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs a postgres user to own the cluster: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := p.command("initdb", "-D", p.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	p.start()
	return p
}

func (p *postgresCluster) data() string { return filepath.Join(p.dir, "data") }

func (p *postgresCluster) url() string {
	return "postgres://postgres@127.0.0.1:" + p.port + "/postgres?sslmode=disable"
}

// command runs a Postgres binary, as the postgres user when the test runs as root.
func (p *postgresCluster) command(name string, args ...string) *exec.Cmd {
	bin := filepath.Join(p.bin, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
	}
	return exec.Command(bin, args...)
}

func (p *postgresCluster) start() {
	p.t.Helper()
	// fsync off: the suite stops the server, never the machine, so nothing is lost by it.
	opts := fmt.Sprintf("-p %s -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200", p.port, p.dir)
	if out, err := p.command("pg_ctl", "-D", p.data(), "-l", filepath.Join(p.dir, "postgres.log"), "-o", opts, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		p.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, tail(filepath.Join(p.dir, "postgres.log"), 2000))
	}
}

// stop stops the server at once (immediate mode: as if it crashed; it recovers on start).
func (p *postgresCluster) stop() {
	if _, err := os.Stat(filepath.Join(p.data(), "postmaster.pid")); err != nil {
		return
	}
	if out, err := p.command("pg_ctl", "-D", p.data(), "-m", "immediate", "-w", "-t", "30", "stop").CombinedOutput(); err != nil {
		p.t.Logf("pg_ctl stop: %v\n%s", err, out)
	}
}

// temporalServer is a file-backed Temporal dev server from the pinned CLI build. Its state
// lives in its db file: kill and start bring it back with every workflow it had, and a
// server started with another db file knows nothing of the old one's.
type temporalServer struct {
	t      testing.TB
	addr   string
	args   []string
	log    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// startTemporal starts a dev server whose db file and log are named after name, in dir.
//
// Besides the ports given here, the dev server binds internal ports it picks itself. With
// several test binaries starting servers at once, one can lose a port to another process and
// exit while it starts (seen once in eight CI runs on 2026-12-03). A server that exits before
// it answers is started again on new ports and a new db file, at most three times.
func startTemporal(t testing.TB, dir, name string) *temporalServer {
	t.Helper()
	s := &temporalServer{t: t, log: filepath.Join(dir, name+".log")}
	for attempt := 1; ; attempt++ {
		port := testenv.FreePort(t)
		s.addr = "127.0.0.1:" + port
		s.args = []string{"server", "start-dev", "--ip", "127.0.0.1", "--port", port, "--http-port", testenv.FreePort(t),
			"--metrics-port", testenv.FreePort(t), "--headless", "--db-filename", filepath.Join(dir, fmt.Sprintf("%s-%d.db", name, attempt)),
			"--namespace", "default", "--log-level", "error"}
		s.args = append(s.args, workflows.DevServerFlags()...)
		err := s.tryStart()
		if err == nil {
			break
		}
		if !errors.Is(err, errExitedAtStart) || attempt == 3 {
			t.Fatalf("temporal dev server on %s: %v", s.addr, err)
		}
		t.Logf("temporal dev server on %s exited while it started (attempt %d); starting it on new ports", s.addr, attempt)
	}
	t.Cleanup(s.stop)
	return s
}

// errExitedAtStart is a dev server that exited before it answered.
var errExitedAtStart = errors.New("exited before it answered")

// start runs the server on its port and db file and waits until it answers.
func (s *temporalServer) start() {
	s.t.Helper()
	if err := s.tryStart(); err != nil {
		s.t.Fatalf("temporal dev server on %s: %v", s.addr, err)
	}
}

// tryStart runs the server and waits until it answers; errExitedAtStart if it exits first.
func (s *temporalServer) tryStart() error {
	s.t.Helper()
	s.cmd = exec.Command(testenv.TemporalCLI(s.t), s.args...)
	s.exited = startLogged(s.t, s.cmd, s.log, "temporal dev server")
	exited := false
	err := waitFor(60*time.Second, func() error {
		select {
		case <-s.exited:
			exited = true
			return nil
		default:
		}
		c, err := client.Dial(client.Options{HostPort: s.addr, Namespace: "default", Logger: testenv.QuietLogger})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	})
	switch {
	case exited:
		s.cmd = nil
		return fmt.Errorf("%w\n%s", errExitedAtStart, tail(s.log, 4000))
	case err != nil:
		return fmt.Errorf("did not answer: %v\n%s", err, tail(s.log, 2000))
	}
	return nil
}

// kill stops the server with SIGKILL, as a crash would: only what its db file holds survives.
func (s *temporalServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// stop stops the server cleanly (SIGINT), or kills it after a bounded wait.
func (s *temporalServer) stop() {
	if s.cmd == nil {
		return
	}
	stopProcess(s.cmd, s.exited, syscall.SIGINT, 10*time.Second)
	s.cmd = nil
}

// workerProcess is `checkout worker` as a child process, so a fault can SIGKILL or SIGSTOP it.
type workerProcess struct {
	t      testing.TB
	name   string // names its log files; several workers may run side by side
	bin    string
	dir    string
	env    []string
	cmd    *exec.Cmd
	runs   int
	log    string
	exited chan struct{}
}

func (w *workerProcess) start() {
	w.t.Helper()
	w.runs++
	w.log = filepath.Join(w.dir, fmt.Sprintf("%s-%d.log", w.name, w.runs))
	cmd := exec.Command(w.bin, "worker")
	cmd.Env = append(os.Environ(), w.env...)
	cmd.Env = append(cmd.Env, "WORKER_METRICS_ADDR=127.0.0.1:"+testenv.FreePort(w.t))
	w.cmd = cmd
	exited := startLogged(w.t, cmd, w.log, "worker")
	w.exited = exited
	waitErr := waitFor(60*time.Second, func() error {
		select {
		case <-exited:
			return fmt.Errorf("worker exited")
		default:
		}
		b, _ := os.ReadFile(w.log)
		if strings.Contains(string(b), `"worker started"`) {
			return nil
		}
		return fmt.Errorf("worker not started yet")
	})
	if waitErr != nil {
		w.t.Fatalf("worker: %v\n%s", waitErr, tail(w.log, 3000))
	}
}

// kill sends SIGKILL: no graceful stop, in-flight tasks are lost with the process.
func (w *workerProcess) kill() {
	if w.cmd == nil {
		return
	}
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.exited
	w.cmd = nil
}

// pause stalls the worker with SIGSTOP: it keeps its connections and the tasks it holds, and
// does nothing until resume, like a process frozen by a long GC pause or a stuck host.
func (w *workerProcess) pause() { _ = w.cmd.Process.Signal(syscall.SIGSTOP) }

// resume lets a paused worker go on (SIGCONT) with whatever it held when it was stopped.
func (w *workerProcess) resume() { _ = w.cmd.Process.Signal(syscall.SIGCONT) }

// stop asks the worker to stop (SIGTERM) and waits a bounded time.
func (w *workerProcess) stop() {
	if w.cmd == nil {
		return
	}
	w.resume() // a paused process would not act on SIGTERM
	stopProcess(w.cmd, w.exited, syscall.SIGTERM, 15*time.Second)
	w.cmd = nil
}
