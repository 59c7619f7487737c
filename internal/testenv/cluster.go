package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster starts a Redis Cluster of masters (no replicas) from the installed
// redis-server on free ports, in a temporary directory, creates it with
// `redis-cli --cluster create`, waits until every node reports cluster_state:ok, and returns
// a client on it. The nodes stop when the test ends.
func RedisCluster(t testing.TB, masters int) *redis.ClusterClient {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed: %v", err)
	}
	dir := t.TempDir()
	var addrs []string
	for i := range masters {
		port := clusterPort(t)
		nodeDir := filepath.Join(dir, strconv.Itoa(i))
		cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"), "--dir", dir, "--dbfilename", fmt.Sprintf("dump-%d.rdb", i),
			"--save", "", "--appendonly", "no", "--cluster-node-timeout", "2000", "--logfile", filepath.Join(dir, fmt.Sprintf("node-%d.log", i)))
		if err := exec.Command("mkdir", "-p", nodeDir).Run(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server on %s: %v", port, err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		addrs = append(addrs, "127.0.0.1:"+port)
	}
	for _, a := range addrs {
		waitFor(t, "redis node "+a, func() error {
			c := redis.NewClient(&redis.Options{Addr: a})
			defer c.Close()
			return c.Ping(context.Background()).Err()
		})
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		waitFor(t, "cluster_state:ok on "+a, func() error {
			c := redis.NewClient(&redis.Options{Addr: a})
			defer c.Close()
			info, err := c.ClusterInfo(context.Background()).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("cluster info: %v %q", err, info)
			}
			return nil
		})
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	waitFor(t, "the cluster client to see every master", func() error {
		var n atomic.Int32 // ForEachMaster runs fn on every master at once
		err := rdb.ForEachMaster(context.Background(), func(context.Context, *redis.Client) error { n.Add(1); return nil })
		if err == nil && int(n.Load()) != masters {
			err = fmt.Errorf("%d masters of %d", n.Load(), masters)
		}
		return err
	})
	return rdb
}

// clusterPort returns a free port whose cluster bus port (port + 10000) is free too.
func clusterPort(t testing.TB) string {
	t.Helper()
	for range 100 {
		p := 20000 + rand.IntN(30000)
		a, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		return strconv.Itoa(p)
	}
	t.Fatal("no free port pair for a cluster node")
	return ""
}

func waitFor(t testing.TB, what string, try func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
