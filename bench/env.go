package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/procfs"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/checkout-saga/checkout-saga/migrations"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// env is the services one run uses, all of them its own: a Redis DB with random key names,
// a fresh Postgres database and a Temporal dev server on free ports.
type env struct {
	runID string // in every SKU and key this run creates

	rdb      *redis.Client // the benchmark's own client, sized for 64 concurrent callers
	redisURL string

	adminURL, dbURL, dbName string

	temporalCLI string
	grpcGzip    bool          // the in-process clients gzip their requests (-grpc-gzip)
	saRefresh   bool          // the dev CLI's search-attribute cache refresh on every read (-dev-sa-refresh)
	partitions  int           // task-queue partitions, 0: the product's (-tq-partitions)
	poll        time.Duration // the e2e client polls GET this often instead of waiting with ?wait (-poll)
	srv         *testsuite.DevServer
	devPID      int // 0 when the dev server's process was not found

	closers []func()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func openEnv(ctx context.Context, o options, logger *slog.Logger) (_ *env, err error) {
	e := &env{runID: strings.ToUpper(randomHex(4)), redisURL: o.redisURL, adminURL: o.postgresURL, temporalCLI: o.temporalCLI, grpcGzip: o.grpcGzip, saRefresh: o.devSARefresh, partitions: o.partitions, poll: o.poll}
	defer func() {
		if err != nil {
			e.close()
		}
	}()

	// Redis.
	opts, err := redis.ParseURL(o.redisURL)
	if err != nil {
		return nil, fmt.Errorf("parse -redis %s: %w", o.redisURL, err)
	}
	if opts.DB == 0 {
		return nil, fmt.Errorf("-redis %s: use a DB other than 0, which the local stack owns", o.redisURL)
	}
	opts.PoolSize = 128 // the widest load is 64 concurrent callers
	e.rdb = redis.NewClient(opts)
	e.closers = append(e.closers, func() { _ = e.rdb.Close() })
	if err := e.rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("ping redis at %s (start it: see README): %w", o.redisURL, err)
	}
	e.closers = append(e.closers, e.deleteRedisKeys)
	progress("redis %s, keys named *%s*", o.redisURL, e.runID)

	// Postgres: a database of our own, migrated, dropped at the end.
	admin, err := pgx.Connect(ctx, o.postgresURL)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres at %s (start it: see README): %w", o.postgresURL, err)
	}
	e.dbName = "bench_" + strings.ToLower(e.runID)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+e.dbName)
	_ = admin.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("create database %s: %w", e.dbName, err)
	}
	e.closers = append(e.closers, e.dropDatabase)
	// The same server and settings (sslmode, ...) as -postgres, on the new database.
	u, err := url.Parse(o.postgresURL)
	if err != nil {
		return nil, fmt.Errorf("parse -postgres: %w", err)
	}
	u.Path = "/" + e.dbName
	e.dbURL = u.String()
	if err := migrations.Apply(ctx, e.dbURL); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", e.dbName, err)
	}
	progress("postgres database %s created and migrated", e.dbName)

	// Temporal: the pinned CLI as a dev server on free ports, in memory.
	if _, err := os.Stat(o.temporalCLI); err != nil {
		return nil, fmt.Errorf("the Temporal dev server is not at %s: run `make tools` (or pass -temporal): %w", o.temporalCLI, err)
	}
	args := e.devServerArgs()
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	e.srv, err = testsuite.StartDevServer(startCtx, testsuite.DevServerOptions{
		ExistingPath:  o.temporalCLI,
		LogLevel:      "error",
		ExtraArgs:     args,
		Stdout:        io.Discard,
		Stderr:        os.Stderr,
		ClientOptions: &client.Options{Namespace: "default", Logger: quietLogger(logger)},
	})
	if err != nil {
		// StartDevServer does not kill its child when readiness fails.
		e.killDevServerByScan()
		return nil, fmt.Errorf("start temporal dev server from %s: %w", o.temporalCLI, err)
	}
	e.closers = append(e.closers, func() {
		if err := e.srv.Stop(); err != nil {
			progress("stop temporal dev server: %v", err)
		}
	})
	e.devPID = findDevServerPID(e.srv.FrontendHostPort())
	progress("temporal dev server on %s (pid %d)", e.srv.FrontendHostPort(), e.devPID)
	return e, nil
}

// close undoes openEnv in reverse order.
func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

func (e *env) sku(name string) string { return "B" + e.runID + "-" + name }

// deleteRedisKeys removes every key of this run: all carry the run id.
func (e *env) deleteRedisKeys() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var n int
	iter := e.rdb.Scan(ctx, 0, "*"+e.runID+"*", 1000).Iterator()
	var batch []string
	flush := func() {
		if len(batch) > 0 {
			n += len(batch)
			_ = e.rdb.Unlink(ctx, batch...).Err()
			batch = batch[:0]
		}
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			flush()
		}
	}
	flush()
	if err := iter.Err(); err != nil {
		progress("delete redis keys of run %s: %v", e.runID, err)
		return
	}
	progress("deleted %d redis keys", n)
}

func (e *env) dropDatabase() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		progress("drop database %s: %v", e.dbName, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+e.dbName+" WITH (FORCE)"); err != nil {
		progress("drop database %s: %v", e.dbName, err)
		return
	}
	progress("dropped database %s", e.dbName)
}

// newPool opens a pool on the run's database; maxConns 0 keeps pgxpool's default (the
// product's).
func (e *env) newPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.dbURL)
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// findDevServerPID finds the dev server's process: testsuite.DevServer does not expose it,
// so scan /proc for a `temporal server start-dev ... --port <port>` command line.
func findDevServerPID(hostPort string) int {
	port := hostPort[strings.LastIndex(hostPort, ":")+1:]
	for _, pid := range devServerPIDs() {
		args := cmdline(pid)
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "--port" && args[i+1] == port {
				return pid
			}
		}
	}
	return 0
}

// devServerPIDs lists this process's children that run `server start-dev`.
func devServerPIDs() []int {
	procs, _ := procfs.AllProcs()
	self := os.Getpid()
	var pids []int
	for _, p := range procs {
		args, _ := p.CmdLine()
		if len(args) < 3 || args[1] != "server" || args[2] != "start-dev" {
			continue
		}
		if st, err := p.Stat(); err == nil && st.PPID == self {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// killDevServerByScan kills dev servers this process started, when StartDevServer failed
// and returned no handle to stop them.
func (e *env) killDevServerByScan() {
	for _, pid := range devServerPIDs() {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
			_, _ = p.Wait()
		}
	}
}

func cmdline(pid int) []string {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return nil
	}
	args, _ := p.CmdLine()
	return args
}

// processCPU is the user+system CPU time a process has used, from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("read /proc/%d: %w", pid, err)
	}
	return statCPU(p)
}

func statCPU(p procfs.Proc) (time.Duration, error) {
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("read /proc/%d/stat: %w", p.PID, err)
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}

// redisCPU is the Redis server's user+system CPU time, from INFO cpu.
func (e *env) redisCPU(ctx context.Context) (time.Duration, error) {
	info, err := e.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// postgresCPU is the CPU time of every postgres process on the machine (the postmaster and
// its backends), from /proc: a backend that exits within a phase takes its CPU with it, so
// this undercounts short-lived connections (the pools here keep theirs open).
func postgresCPU() time.Duration {
	procs, _ := procfs.AllProcs()
	var total time.Duration
	for _, p := range procs {
		if comm, err := p.Comm(); err != nil || comm != "postgres" {
			continue
		}
		if d, err := statCPU(p); err == nil {
			total += d
		}
	}
	return total
}

// cpuSnapshot is the CPU time used so far by this process (load generator, API and worker),
// the dev server, Redis and Postgres.
type cpuSnapshot struct{ self, devServer, redis, postgres time.Duration }

func (e *env) cpu(ctx context.Context) cpuSnapshot {
	var s cpuSnapshot
	s.self, _ = processCPU(os.Getpid())
	if e.devPID != 0 {
		s.devServer, _ = processCPU(e.devPID)
	}
	s.redis, _ = e.redisCPU(ctx)
	s.postgres = postgresCPU()
	return s
}

func (s cpuSnapshot) sub(o cpuSnapshot) cpuSnapshot {
	return cpuSnapshot{self: s.self - o.self, devServer: s.devServer - o.devServer, redis: s.redis - o.redis, postgres: s.postgres - o.postgres}
}

func (s cpuSnapshot) add(o cpuSnapshot) cpuSnapshot {
	return cpuSnapshot{self: s.self + o.self, devServer: s.devServer + o.devServer, redis: s.redis + o.redis, postgres: s.postgres + o.postgres}
}

func (s cpuSnapshot) total() time.Duration { return s.self + s.devServer + s.redis + s.postgres }

// facts are the machine and service facts the report opens with.
type facts struct{ rows [][2]string }

func (f *facts) add(k, v string) { f.rows = append(f.rows, [2]string{k, v}) }

func shell(ctx context.Context, name string, args ...string) string {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(%s: %v)", name, err)
	}
	return strings.TrimSpace(string(out))
}

func machineFacts(ctx context.Context) *facts {
	f := &facts{}
	f.add("date", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	f.add("nproc", shell(ctx, "nproc"))
	f.add("free -m", "\n"+shell(ctx, "free", "-m"))
	model := "unknown"
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if cpus, err := fs.CPUInfo(); err == nil && len(cpus) > 0 {
			model = cpus[0].ModelName
		}
	}
	f.add("CPU", model)
	f.add("kernel", shell(ctx, "uname", "-sr"))
	f.add("Go", runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+", GOMAXPROCS "+strconv.Itoa(runtime.GOMAXPROCS(0)))
	f.add("load average at start", loadAverage())
	return f
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute figures.
func loadAverage() string {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return "unknown"
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%.2f %.2f %.2f", l.Load1, l.Load5, l.Load15)
}

func (e *env) redisVersion(ctx context.Context) string {
	info, err := e.rdb.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v + ", DB " + strconv.Itoa(e.rdb.Options().DB) + ", loopback TCP"
		}
	}
	return "unknown"
}

func (e *env) postgresFacts(ctx context.Context) string {
	conn, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		return "unknown"
	}
	defer conn.Close(ctx)
	var version, syncCommit, fsync, maxConns string
	_ = conn.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync'), current_setting('max_connections')").
		Scan(&version, &syncCommit, &fsync, &maxConns)
	return fmt.Sprintf("%s (synchronous_commit=%s, fsync=%s, max_connections=%s), loopback TCP", version, syncCommit, fsync, maxConns)
}

// devServerArgs are the flags every dev server of the benchmark starts with: the contract's
// search attributes, created with the server, and their cache on.
//
// The dev CLI turns on system.forceSearchAttributesCacheRefreshOnRead, so that search
// attributes created while it runs are seen at once: every search-attribute read (each
// upsert, each visibility row) then re-reads the cluster metadata from SQLite. A server
// outside the CLI caches it, as Temporal's description of the setting asks ("should not be
// turned on in production"). The attributes here exist from the start, so the cache is never
// stale. -dev-sa-refresh keeps the CLI's setting.
func (e *env) devServerArgs() []string {
	// The product's flags, then this run's changes to them: the CLI keeps the last value
	// given for a dynamic-config key.
	args := workflows.DevServerFlags()
	if e.saRefresh {
		args = append(args, "--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=true")
	}
	for _, kv := range e.partitionConfig() {
		args = append(args, "--dynamic-config-value", kv)
	}
	return args
}

// partitionConfig gives every task queue -tq-partitions partitions, or the product's.
func (e *env) partitionConfig() []string {
	if e.partitions != 0 {
		return workflows.PartitionConfig(e.partitions)
	}
	return workflows.PartitionConfig(workflows.TaskQueuePartitions)
}

func (e *env) temporalFacts() string {
	v := shell(context.Background(), e.temporalCLI, "--version")
	facts := v + ", in-memory SQLite, started by testsuite.StartDevServer"
	if !e.saRefresh {
		facts += ", with system.forceSearchAttributesCacheRefreshOnRead=false (the CLI's true re-reads cluster metadata on every search-attribute read)"
	}
	facts += ", " + strings.Join(e.partitionConfig(), ", ")
	if e.partitions == 0 {
		facts += " (the product's; Temporal's default is 4)"
	}
	return facts
}
