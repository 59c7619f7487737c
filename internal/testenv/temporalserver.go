package testenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// TemporalServerPorts is how many consecutive ports the scale profile's server takes from its
// base (tools/scale/config/scale.yaml): frontend gRPC first, Prometheus metrics last.
const TemporalServerPorts = 10

// TemporalServerOptions say where and how StartTemporalServer runs the full server.
type TemporalServerOptions struct {
	Root       string // the repository (tools/scale/config is read from it)
	Server     string // the temporal-server binary (make tools)
	SQLTool    string // the temporal-sql-tool binary
	PortBase   int    // frontend gRPC port; the next 9 are taken too
	Shards     int    // history shards, fixed when the databases are created
	Database   string // the two Postgres databases: Database and Database+"_visibility"
	AdminURL   string // Postgres as admin, to create and drop the databases
	Dir        string // the server's log goes here (temporal-server.log)
	KeepSchema bool   // reuse the databases when they exist (make run-scale's second run)
	// SQLPlugin is the server's and the SQL tool's Postgres driver: "" for the profile's
	// postgres12_pgx, or postgres12 (lib/pq), which the benchmark measures beside it.
	SQLPlugin string
	// DynamicConfig is the server's dynamic config file; "" for the profile's
	// (tools/scale/config/dynamicconfig/scale.yaml).
	DynamicConfig string
}

// DefaultSQLPlugin is the scale profile's Postgres driver for the server and its SQL tool.
const DefaultSQLPlugin = "postgres12_pgx"

func (o TemporalServerOptions) sqlPlugin() string {
	if o.SQLPlugin == "" {
		return DefaultSQLPlugin
	}
	return o.SQLPlugin
}

// TemporalServerProcess is a running Temporal server on Postgres.
type TemporalServerProcess struct {
	HostPort   string // frontend gRPC, namespace default
	MetricsURL string // the server's Prometheus endpoint
	Log        string
	cmd        *exec.Cmd
	done       chan struct{}
}

// TemporalServerBinaries returns the scale profile's server and SQL tool: TEMPORAL_SERVER and
// TEMPORAL_SQL_TOOL, or .tools/temporal-server and .tools/temporal-sql-tool at root.
func TemporalServerBinaries(root string) (server, sqlTool string) {
	return env("TEMPORAL_SERVER", filepath.Join(root, ".tools", "temporal-server")),
		env("TEMPORAL_SQL_TOOL", filepath.Join(root, ".tools", "temporal-sql-tool"))
}

// TemporalServer starts the full Temporal server (frontend, history, matching and worker in
// one process, built by `make tools`) on free ports, with its own two Postgres databases set
// up by the SQL tool from the schema embedded in it, shards history shards, namespace default
// and the contract's search attributes (by `checkout setup-temporal`). It stops the server and
// drops the databases when the test ends. Without the built server the test is skipped, or
// fails under CI=1.
func TemporalServer(t testing.TB, shards int) *TemporalServerProcess {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("find module root: %v", err)
	}
	server, sqlTool := TemporalServerBinaries(root)
	for _, p := range []string{server, sqlTool} {
		if _, err := os.Stat(p); err != nil {
			msg := fmt.Sprintf("the Temporal server is not built at %s: run `make tools` (or set TEMPORAL_SERVER and TEMPORAL_SQL_TOOL)", p)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := TemporalServerOptions{
		Root: root, Server: server, SQLTool: sqlTool, PortBase: freePortRange(t, TemporalServerPorts),
		Shards: shards, Database: RandomID("temporal_test_"), Dir: t.TempDir(),
		AdminURL: env("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
	}
	t.Cleanup(func() {
		if err := DropTemporalDatabases(opts.AdminURL, opts.Database); err != nil {
			t.Logf("drop temporal databases: %v", err)
		}
	})
	srv, err := StartTemporalServer(ctx, opts)
	for attempt := 0; err != nil && strings.Contains(err.Error(), "address already in use") && attempt < 3; attempt++ {
		opts.PortBase = freePortRange(t, TemporalServerPorts) // taken between the check and the bind
		srv, err = StartTemporalServer(ctx, opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Logf("stop temporal server: %v", err)
		}
		if t.Failed() {
			t.Logf("temporal server log (last lines):\n%s", LastLines(srv.Log, 20))
		}
	})
	if err := SetupTemporal(ctx, root, srv.HostPort); err != nil {
		t.Fatal(err)
	}
	return srv
}

// StartTemporalServer creates and migrates the databases (unless KeepSchema finds them), starts
// the server and waits until its frontend answers. The caller registers the namespace
// (SetupTemporal) and stops the server.
func StartTemporalServer(ctx context.Context, o TemporalServerOptions) (*TemporalServerProcess, error) {
	pg, err := pgx.ParseConfig(o.AdminURL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", o.AdminURL, err)
	}
	for _, db := range []struct{ name, schema string }{
		{o.Database, "postgresql/v12/temporal"},
		{o.Database + "_visibility", "postgresql/v12/visibility"},
	} {
		if err := setupSchema(ctx, o, pg, db.name, db.schema); err != nil {
			return nil, err
		}
	}
	logPath := filepath.Join(o.Dir, "temporal-server.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	configRoot := filepath.Join(o.Root, "tools", "scale")
	dynamicConfig := o.DynamicConfig
	if dynamicConfig == "" {
		dynamicConfig = filepath.Join(configRoot, "config", "dynamicconfig", "scale.yaml")
	}
	cmd := exec.Command(o.Server, "--root", configRoot, "--config", "config", "--env", "scale", "--allow-no-auth", "start")
	cmd.Env = append(os.Environ(),
		"TEMPORAL_PORT_BASE="+strconv.Itoa(o.PortBase), "TEMPORAL_SHARDS="+strconv.Itoa(o.Shards),
		"TEMPORAL_DB="+o.Database, "TEMPORAL_VISIBILITY_DB="+o.Database+"_visibility",
		fmt.Sprintf("TEMPORAL_PG_ADDR=%s:%d", pg.Host, pg.Port),
		"TEMPORAL_SQL_PLUGIN="+o.sqlPlugin(), "TEMPORAL_DYNAMIC_CONFIG="+dynamicConfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a Ctrl-C of the caller is not ours
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", o.Server, err)
	}
	p := &TemporalServerProcess{
		HostPort:   net.JoinHostPort("127.0.0.1", strconv.Itoa(o.PortBase)),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", o.PortBase+9),
		Log:        logPath, cmd: cmd, done: make(chan struct{}),
	}
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	for {
		if err := temporalHealthy(ctx, p.HostPort); err == nil {
			return p, nil
		} else if ctx.Err() != nil {
			_ = p.Stop()
			return nil, fmt.Errorf("temporal server on %s did not answer: %v; log:\n%s", p.HostPort, err, LastLines(logPath, 20))
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("temporal server exited at start; log:\n%s", LastLines(logPath, 20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Pid is the server's process id.
func (p *TemporalServerProcess) Pid() int { return p.cmd.Process.Pid }

// Stop interrupts the server and waits for it (killing it after 20 s).
func (p *TemporalServerProcess) Stop() error {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		return nil
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("temporal server did not stop within 20s; killed")
	}
}

// setupSchema creates database name and applies the schema embedded in the SQL tool to it.
// With KeepSchema, an existing database is migrated forward (update-schema is idempotent).
func setupSchema(ctx context.Context, o TemporalServerOptions, pg *pgx.ConnConfig, name, schema string) error {
	base := []string{"--ep", pg.Host, "-p", strconv.Itoa(int(pg.Port)), "-u", pg.User, "--pl", o.sqlPlugin(), "--db", name}
	if pg.Password != "" {
		base = append(base, "--pw", pg.Password)
	}
	steps := [][]string{{"create-database"}, {"setup-schema", "-v", "0.0"}, {"update-schema", "--schema-name", schema}}
	if o.KeepSchema && databaseExists(ctx, o.AdminURL, name) {
		steps = steps[2:]
	}
	for _, step := range steps {
		out, err := exec.CommandContext(ctx, o.SQLTool, append(base, step...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("temporal-sql-tool %s on %s: %v\n%s", step[0], name, err, out)
		}
	}
	return nil
}

func databaseExists(ctx context.Context, adminURL, name string) bool {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return false
	}
	defer conn.Close(ctx)
	var n int
	_ = conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n)
	return n == 1
}

// DropTemporalDatabases drops the two databases of a server started with Database name.
func DropTemporalDatabases(adminURL, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var errs []error
	for _, db := range []string{name, name + "_visibility"} {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SetupTemporal runs the product's own `checkout setup-temporal` (namespace default and the
// contract's search attributes) against the server at hostPort.
func SetupTemporal(ctx context.Context, root, hostPort string) error {
	cmd := exec.CommandContext(ctx, "go", "run", "./cmd/checkout", "setup-temporal")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+hostPort, "TEMPORAL_NAMESPACE=default", "LOG_LEVEL=warn")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("checkout setup-temporal on %s: %v\n%s", hostPort, err, out)
	}
	return nil
}

func temporalHealthy(ctx context.Context, hostPort string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Logger: QuietLogger})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
	return err
}

// freePortRange is FreePortBase for a test.
func freePortRange(t testing.TB, n int) int {
	t.Helper()
	base, err := FreePortBase(n)
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// FreePortBase returns the first of n consecutive ports on 127.0.0.1 that were free a moment
// ago: a random start, so parallel users rarely race for the same range, below Linux's
// ephemeral range (32768 and up), where outgoing connections would take them.
func FreePortBase(n int) (int, error) {
	for range 100 {
		base := 20000 + rand.IntN(12000)
		if portsFree(base, n) {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports", n)
}

func portsFree(base, n int) bool {
	for p := base; p < base+n; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}

// LastLines returns the last n lines of the file at path (for logs in a failed test).
func LastLines(path string, n int) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// QuietLogger drops the SDK's log lines: those of clients that dial a server still starting
// or down on purpose.
var QuietLogger = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
