package testenv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
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
	return RedisClusterWithReplicas(t, masters, 0)
}

// RedisClusterWithReplicas is RedisCluster with replicas replicas of each master, in sync
// when it returns (see FailOver). The client's Addrs list every node.
func RedisClusterWithReplicas(t testing.TB, masters, replicas int) *redis.ClusterClient {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed: %v", err)
	}
	dir := t.TempDir()
	// The tests fail over by command (FailOver), never by timeout, so the node timeout only
	// has to outlast a stall: at 2 s, a node that a loaded CI machine (or a replica's first
	// full sync, which forks) held still that long could be failed while the cluster formed.
	const nodeTimeout = "5000"
	var addrs []string
	for i := range masters * (1 + replicas) {
		port := clusterPort(t)
		nodeDir := filepath.Join(dir, strconv.Itoa(i))
		cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"), "--dir", dir, "--dbfilename", fmt.Sprintf("dump-%d.rdb", i),
			"--save", "", "--appendonly", "no", "--cluster-node-timeout", nodeTimeout, "--logfile", filepath.Join(dir, fmt.Sprintf("node-%d.log", i)))
		if err := exec.Command("mkdir", "-p", nodeDir).Run(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server on %s: %v", port, err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		addrs = append(addrs, "127.0.0.1:"+port)
	}
	for i, a := range addrs {
		waitFor(t, "redis node "+a, func() error {
			c := redis.NewClient(&redis.Options{Addr: a})
			defer c.Close()
			if err := c.Ping(context.Background()).Err(); err != nil {
				log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node-%d.log", i)))
				return fmt.Errorf("%w; its log:\n%s", err, log)
			}
			return nil
		})
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
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
	// A node redis-cli made a replica can still say role:master for a moment: wait until
	// every replica is one, with its link to its master up.
	waitFor(t, fmt.Sprintf("%d replicas in sync", masters*replicas), func() error {
		synced := 0
		var nodes []string // each node's role and link, for a failure's message
		for i, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.Info(context.Background(), "replication").Result()
			c.Close()
			if err != nil {
				return fmt.Errorf("replication of %s: %v", a, err)
			}
			if strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
				synced++
			}
			nodes = append(nodes, fmt.Sprintf("node %d (%s): %s %s", i, a, infoField(info, "role"), infoField(info, "master_link_status")))
		}
		if synced != masters*replicas {
			for i := range addrs { // the last lines of each node's log, for a failure's message
				log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node-%d.log", i)))
				lines := strings.Split(strings.TrimSpace(string(log)), "\n")
				nodes = append(nodes, fmt.Sprintf("node %d's log ends:\n%s", i, strings.Join(lines[max(len(lines)-5, 0):], "\n")))
			}
			return fmt.Errorf("%d of %d replicas in sync; %s", synced, masters*replicas, strings.Join(nodes, "\n"))
		}
		return nil
	})
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	waitFor(t, "the cluster client to see every master", func() error {
		// ForEachMaster reads the client's cached slots, which a first read taken while the
		// cluster still converged leaves short of a master: ask for them again each time.
		rdb.ReloadState(context.Background())
		var n atomic.Int32 // ForEachMaster runs fn on every master at once
		err := rdb.ForEachMaster(context.Background(), func(context.Context, *redis.Client) error { n.Add(1); return nil })
		if err == nil && int(n.Load()) != masters {
			err = fmt.Errorf("%d masters of %d", n.Load(), masters)
		}
		return err
	})
	return rdb
}

// infoField is field's value in an INFO reply, "" when absent.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// clusterPort returns a free port whose cluster bus port (port + 10000) is free too.
func clusterPort(t testing.TB) string {
	t.Helper()
	port, err := FreeClusterPort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// FreeClusterPort returns a free port for a Redis Cluster node: one whose cluster bus port
// (port + 10000) is free too, or the node cannot start. The node's port lies in 2000-9999 and
// its bus port in 12000-19999: below the kernel's ephemeral ports (32768 and up), where a port
// free when checked can be taken, before redis-server binds it, as the source port of any
// connection the machine opens (a node on 49300 never answered a PING in a CI run while
// other tests ran), and below the ports FreePortBase gives a Temporal server (20000 and up).
func FreeClusterPort() (string, error) {
	for range 100 {
		p := 2000 + rand.IntN(8000)
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
		return strconv.Itoa(p), nil
	}
	return "", errors.New("no free port pair (port and port + 10000) for a cluster node")
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

// SlotMove moves one slot of a cluster from its master to another, step by step as
// `redis-cli --cluster reshard` does (IMPORTING, MIGRATING, MIGRATE of its keys, NODE), so a
// test can run commands between the steps.
type SlotMove struct {
	Slot         int64
	From, To     *redis.Client
	fromID, toID string
	masters      []*redis.Client
}

// BeginSlotMove marks slot as importing on another master and migrating on its own.
func BeginSlotMove(t testing.TB, rdb *redis.ClusterClient, slot int64) *SlotMove {
	t.Helper()
	ctx := context.Background()
	m := &SlotMove{Slot: slot}
	owner, err := SlotOwner(ctx, rdb, slot)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range rdb.Options().Addrs {
		c := nodeClient(t, a)
		role, err := c.Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			continue
		}
		m.masters = append(m.masters, c)
		switch {
		case a == owner:
			m.From = c
		case m.To == nil:
			m.To = c
		}
	}
	if m.From == nil || m.To == nil {
		t.Fatalf("slot %d: no source (%s) or target master among %v", slot, owner, rdb.Options().Addrs)
	}
	m.fromID, m.toID = m.From.ClusterMyID(ctx).Val(), m.To.ClusterMyID(ctx).Val()
	if err := m.To.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.fromID).Err(); err != nil {
		t.Fatalf("setslot importing: %v", err)
	}
	if err := m.From.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID).Err(); err != nil {
		t.Fatalf("setslot migrating: %v", err)
	}
	return m
}

// MoveKeys migrates the slot's keys that are still on the source (at most max; 0: all) and
// returns how many it moved.
func (m *SlotMove) MoveKeys(t testing.TB, max int) int {
	t.Helper()
	ctx := context.Background()
	n := max
	if n == 0 {
		n = 1 << 20
	}
	keys, err := m.From.ClusterGetKeysInSlot(ctx, int(m.Slot), n).Result()
	if err != nil {
		t.Fatalf("getkeysinslot %d: %v", m.Slot, err)
	}
	if len(keys) == 0 {
		return 0
	}
	host, port, _ := strings.Cut(m.To.Options().Addr, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	if err := m.From.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("migrate %d keys of slot %d: %v", len(keys), m.Slot, err)
	}
	return len(keys)
}

// Finish moves the remaining keys and gives the slot to the target on every master.
func (m *SlotMove) Finish(t testing.TB) {
	t.Helper()
	m.MoveKeys(t, 0)
	ctx := context.Background()
	for _, c := range append([]*redis.Client{m.To, m.From}, m.masters...) {
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID).Err(); err != nil {
			t.Fatalf("setslot node on %s: %v", c.Options().Addr, err)
		}
	}
}

// SlotOwner is the address of the master serving slot.
func SlotOwner(ctx context.Context, rdb *redis.ClusterClient, slot int64) (string, error) {
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, r := range slots {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("no master serves slot %d", slot)
}

// FailOver promotes a replica of the master serving slot (CLUSTER FAILOVER on the replica,
// the coordinated kind: the master stops writes until the replica caught up), waits until
// the cluster client routes the slot to it, and returns its client and the old master's.
// With force, CLUSTER FAILOVER FORCE: the replica takes over without waiting for the master,
// so writes it has not received are lost, as when a master dies.
func FailOver(t testing.TB, rdb *redis.ClusterClient, slot int64, force bool) (promoted, old *redis.Client) {
	t.Helper()
	ctx := context.Background()
	owner, err := SlotOwner(ctx, rdb, slot)
	if err != nil {
		t.Fatal(err)
	}
	old = nodeClient(t, owner)
	replica, promoted := replicaOf(t, rdb, owner)
	args := []any{"CLUSTER", "FAILOVER"}
	if force {
		args = append(args, "FORCE")
	}
	if err := promoted.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("cluster failover on %s: %v", replica, err)
	}
	waitForSlotOn(t, rdb, slot, replica)
	return promoted, old
}

// FailOverLosingWrites promotes a replica of the master serving slot after cutting it off
// from its master, so the writes write makes on the master (acknowledged, as asynchronous
// replication acknowledges them) never reach it: the replica is stopped (SIGSTOP), the
// master drops its replication link, write runs, then CLUSTER FAILOVER TAKEOVER reaches the
// replica before it can reconnect. The old master then resyncs from the new one and loses
// those writes too, as a failover after a master's crash would.
func FailOverLosingWrites(t testing.TB, rdb *redis.ClusterClient, slot int64, write func()) (promoted *redis.Client) {
	t.Helper()
	ctx := context.Background()
	owner, err := SlotOwner(ctx, rdb, slot)
	if err != nil {
		t.Fatal(err)
	}
	replicaAddr, replica := replicaOf(t, rdb, owner)
	// Replication is asynchronous: what the caller wrote before this call must be on the
	// replica before it is cut off, or the failover loses more than write's writes (a busy
	// machine delays the stream by more than the few microseconds until the SIGSTOP).
	master := nodeClient(t, owner)
	sent := replicationOffset(t, master, "master_repl_offset")
	waitFor(t, replicaAddr+" replicating up to offset "+strconv.FormatInt(sent, 10), func() error {
		if got := replicationOffset(t, replica, "slave_repl_offset"); got < sent {
			return fmt.Errorf("at offset %d", got)
		}
		return nil
	})
	pid := processID(t, replica)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop replica %s: %v", replicaAddr, err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	if err := nodeClient(t, owner).Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatalf("drop the replication link of %s: %v", owner, err)
	}
	write()
	takeover := make(chan error, 1)
	go func() { takeover <- replica.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err() }()
	time.Sleep(200 * time.Millisecond) // the command waits in the stopped replica's socket
	resume()                           // a woken Redis serves its clients before its cron reconnects
	if err := <-takeover; err != nil {
		t.Fatalf("cluster failover takeover on %s: %v", replicaAddr, err)
	}
	waitForSlotOn(t, rdb, slot, replicaAddr)
	return replica
}

// replicationOffset reads one offset field of a node's INFO replication.
func replicationOffset(t testing.TB, c *redis.Client, field string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatalf("info replication of %s: %v", c.Options().Addr, err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s of %s: %q", field, c.Options().Addr, v)
			}
			return n
		}
	}
	t.Fatalf("no %s in the replication info of %s", field, c.Options().Addr)
	return 0
}

// waitForSlotOn waits until the cluster client routes slot to the node at addr.
func waitForSlotOn(t testing.TB, rdb *redis.ClusterClient, slot int64, addr string) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, addr+" serving slot "+strconv.FormatInt(slot, 10), func() error {
		rdb.ReloadState(ctx)
		got, err := SlotOwner(ctx, rdb, slot)
		if err == nil && got != addr {
			err = fmt.Errorf("slot %d still on %s", slot, got)
		}
		return err
	})
}

// replicaOf finds a replica of the master at addr among the cluster's nodes.
func replicaOf(t testing.TB, rdb *redis.ClusterClient, master string) (string, *redis.Client) {
	t.Helper()
	for _, a := range rdb.Options().Addrs {
		c := nodeClient(t, a)
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+portOf(master)+"\r") {
			return a, c
		}
	}
	t.Fatalf("no replica of %s", master)
	return "", nil
}

func processID(t testing.TB, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "process_id:")
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
	if err != nil {
		t.Fatalf("process id of %s: %v", c.Options().Addr, err)
	}
	return pid
}

func nodeClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func portOf(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return port
}
