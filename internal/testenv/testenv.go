// Package testenv gives tests the real services they run against: a fresh, migrated
// Postgres database per test, a Redis client, and a Temporal dev server started from the
// project's pinned CLI build. A missing service fails the test with what to do; nothing is
// skipped silently.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/checkout-saga/checkout-saga/migrations"
)

// RandomID returns prefix followed by 12 random hex characters: ids and SKUs that never
// collide with another test or with a local stack sharing the same services.
func RandomID(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Postgres creates a new database on the server at TEST_DATABASE_URL (default: the local
// server's postgres database as admin), applies the migrations, and drops it when the test
// ends. It returns the new database's URL and a pool on it.
func Postgres(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := EmptyPostgres(t, "checkout_test_")
	if err := migrations.Apply(ctx, url); err != nil {
		t.Fatalf("migrate test database: %v", err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("open pool on test database: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the drop, which EmptyPostgres registered first
	return url, pool
}

// EmptyPostgres creates a new database named prefix plus a random suffix, with no
// migrations applied, on the server of TEST_DATABASE_URL (default: the local server's
// postgres database as admin), and drops it when the test ends. It returns its URL.
func EmptyPostgres(t testing.TB, prefix string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adminURL := env("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("connect to postgres at %s (start it, or set TEST_DATABASE_URL): %v", adminURL, err)
	}
	name := RandomID(prefix)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	_ = admin.Close(ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Logf("drop test database %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})

	cfg, err := pgx.ParseConfig(adminURL)
	if err != nil {
		t.Fatalf("parse %s: %v", adminURL, err)
	}
	if cfg.Password != "" {
		return fmt.Sprintf("postgres://%s:%s@%s:%d/%s", cfg.User, cfg.Password, cfg.Host, cfg.Port, name)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, name)
}

// RedisURL is where tests find Redis: TEST_REDIS_URL, default DB 15 of the local server so
// tests never touch the local stack's DB 0.
func RedisURL() string { return env("TEST_REDIS_URL", "redis://127.0.0.1:6379/15") }

// Redis returns a client on RedisURL and fails the test if Redis does not answer. Tests
// isolate themselves with random SKUs (RandomID), not by flushing, so they can run in parallel.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("parse TEST_REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping redis at %s (start it, or set TEST_REDIS_URL): %v", RedisURL(), err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// TemporalCLI is the path of the pinned dev server (tools/temporal: `temporal server
// start-dev` of Temporal server 1.32 with its Web UI): TEMPORAL_CLI, or .tools/temporal at the
// module root (built by `make tools`). It is no Temporal client: tests use the Go SDK.
func TemporalCLI(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TEMPORAL_CLI"); p != "" {
		return p
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("find module root: %v", err)
	}
	p := filepath.Join(root, ".tools", "temporal")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the Temporal dev server is not built at %s: run `make tools` (or set TEMPORAL_CLI)", p)
	}
	return p
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := string(out)
	if len(mod) > 0 && mod[len(mod)-1] == '\n' {
		mod = mod[:len(mod)-1]
	}
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the module")
	}
	return filepath.Dir(mod), nil
}

// DevServer starts a Temporal dev server from the pinned build on free ports, with flags
// passed to `temporal server start-dev` (workflows.DevServerFlags() for the product's search
// attributes and task-queue partitions; passed in rather than imported, so that packages
// below workflows can test with it), and stops it when the test ends. Its frontend address
// is DevServer.FrontendHostPort().
func DevServer(t testing.TB, flags ...string) *testsuite.DevServer {
	t.Helper()
	srv, _ := DevServerWith(t, DevServerOptions{ExtraArgs: flags})
	return srv
}

// DevServerOptions change how DevServerWith starts the dev server.
type DevServerOptions struct {
	// EnableUI serves the Web UI (headless otherwise).
	EnableUI bool
	// UIPort is the UI's port; empty picks a free one.
	UIPort string
	// ExtraArgs go to `temporal server start-dev` as they are, e.g.
	// "--dynamic-config-value", "history.maxTotalUpdates=3".
	ExtraArgs []string
}

// DevServerWith is DevServer with options. With EnableUI it also returns the UI's base URL
// (http://127.0.0.1:<port>), empty otherwise.
func DevServerWith(t testing.TB, opts DevServerOptions) (*testsuite.DevServer, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string(nil), opts.ExtraArgs...)
	uiURL := ""
	if opts.EnableUI {
		if opts.UIPort == "" {
			// The CLI's own default (frontend port + 1000) may be taken; pick one we know.
			opts.UIPort = FreePort(t)
		}
		uiURL = "http://127.0.0.1:" + opts.UIPort
	}
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  TemporalCLI(t),
		LogLevel:      "error",
		ExtraArgs:     args,
		EnableUI:      opts.EnableUI,
		UIPort:        opts.UIPort,
		ClientOptions: &client.Options{Namespace: "default"},
	})
	if err != nil {
		t.Fatalf("start temporal dev server: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Logf("stop temporal dev server: %v", err)
		}
	})
	return srv, uiURL
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// Eventually polls cond every millisecond until it holds, failing the test after 5 s: for
// what another goroutine does soon, without a sleep guessing how soon.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Go runs f on a goroutine of its own and returns where its result will arrive: a call a
// test lets block while it does something else, and then receives with Receive.
func Go[T any](f func() T) <-chan T {
	out := make(chan T, 1)
	go func() { out <- f() }()
	return out
}

// Receive returns what ch sends, failing the test if nothing came within 10 s.
func Receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("not within 10 s: %s", what)
		var zero T
		return zero
	}
}
