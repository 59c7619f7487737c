package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a Redis of the test's own on a free port, persisted as Redis's default
// is: an RDB snapshot written on SAVE, loaded again at start. Restart and RestartFrom stop
// it without saving and start it again, so what it serves afterwards is its last snapshot:
// a host reboot, or a crash between two saves.
type RedisServer struct {
	Addr  string
	dir   string
	cmd   *exec.Cmd
	t     testing.TB
	saves int
	args  []string // more redis-server arguments (a replica's --replicaof)
}

// StartRedisServer starts a RedisServer; it stops when the test ends.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed: %v", err)
	}
	r := &RedisServer{Addr: "127.0.0.1:" + FreePort(t), dir: t.TempDir(), t: t}
	r.start()
	t.Cleanup(r.stop)
	return r
}

// StartRedisReplica starts a RedisServer that replicates master (asynchronously, as Redis
// does) and returns once its link to the master is up and the first sync is done; it stops
// when the test ends.
func StartRedisReplica(t testing.TB, master *RedisServer) *RedisServer {
	t.Helper()
	host, port, _ := net.SplitHostPort(master.Addr)
	r := &RedisServer{Addr: "127.0.0.1:" + FreePort(t), dir: t.TempDir(), t: t, args: []string{"--replicaof", host, port}}
	r.start()
	t.Cleanup(r.stop)
	waitFor(t, "replica "+r.Addr+" of "+master.Addr+" in sync", func() error {
		c := redis.NewClient(&redis.Options{Addr: r.Addr})
		defer c.Close()
		info, err := c.Info(context.Background(), "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") || strings.Contains(info, "master_sync_in_progress:1") {
			return fmt.Errorf("not in sync yet:\n%s", info)
		}
		return nil
	})
	return r
}

// Client returns a client of the server. go-redis reconnects by itself after a restart.
func (r *RedisServer) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Snapshot writes the server's data to disk (SAVE) and keeps a copy of it, whose path
// RestartFrom takes. The server itself restarts from the latest snapshot.
func (r *RedisServer) Snapshot() string {
	r.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	if err := c.Save(context.Background()).Err(); err != nil {
		r.t.Fatalf("save redis %s: %v", r.Addr, err)
	}
	r.saves++
	kept := filepath.Join(r.dir, "snapshot-"+strconv.Itoa(r.saves)+".rdb")
	copyFile(r.t, filepath.Join(r.dir, "dump.rdb"), kept)
	return kept
}

// Restart stops the server without saving (SHUTDOWN NOSAVE) and starts it again from its
// last snapshot (nothing, if it never saved).
func (r *RedisServer) Restart() { r.RestartFrom("") }

// RestartFrom is Restart from the snapshot at path (from Snapshot; "" for the last one).
func (r *RedisServer) RestartFrom(path string) {
	r.t.Helper()
	r.stop()
	if path != "" {
		copyFile(r.t, path, filepath.Join(r.dir, "dump.rdb"))
	}
	r.start()
}

func (r *RedisServer) start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.Addr)
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--dir", r.dir, "--dbfilename", "dump.rdb",
		"--save", "", "--appendonly", "no", "--logfile", filepath.Join(r.dir, "redis.log")}, r.args...)
	r.cmd = exec.Command("redis-server", args...)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server on %s: %v", r.Addr, err)
	}
	waitFor(r.t, "redis at "+r.Addr, func() error {
		c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
		defer c.Close()
		return c.Ping(context.Background()).Err()
	})
}

func (r *RedisServer) stop() {
	if r.cmd == nil {
		return
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	_ = c.Do(context.Background(), "SHUTDOWN", "NOSAVE").Err() // answers with a closed connection
	_ = c.Close()
	_ = r.cmd.Process.Kill() // in case SHUTDOWN did not reach it; a no-op once it exited
	_ = r.cmd.Wait()
	r.cmd = nil
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatalf("read %s: %v", from, err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatalf("write %s: %v", to, err)
	}
}
