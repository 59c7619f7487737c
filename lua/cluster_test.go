package lua

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// The stock scripts and the sold-out gate on a 3-master Redis Cluster: the scripts are
// loaded on every master, no script touches two slots (every key carries the SKU's {sku}
// tag), concurrent reserves on SKUs spread over the masters never hold more than is stocked,
// and the gate's pipelined read works across slots.
func TestStockOnARedisCluster(t *testing.T) {
	rdb := testenv.RedisCluster(t, 3)
	ctx := t.Context()
	s := New(rdb)
	if err := s.Preload(ctx); err != nil {
		t.Fatalf("preload: %v", err)
	}
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		for _, sc := range allScripts {
			ok, err := m.ScriptExists(ctx, sc.Hash()).Result()
			if err != nil || len(ok) != 1 || !ok[0] {
				return fmt.Errorf("master %s lacks the %s script: %v %v", m.Options().Addr, sc.name, ok, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// SKUs until they sit on every master.
	const perSKU = 10
	var skus []string
	onMaster := map[string]bool{}
	for i := 0; len(onMaster) < 3 || len(skus) < 9; i++ {
		sku := fmt.Sprintf("CL-%s-%d", testenv.RandomID(""), i)
		addr, err := masterOf(ctx, rdb, StockKey(sku))
		if err != nil {
			t.Fatal(err)
		}
		onMaster[addr] = true
		skus = append(skus, sku)
		if _, err := s.SetStock(ctx, sku, perSKU, 5); err != nil {
			t.Fatalf("set stock of %s: %v", sku, err)
		}
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	held := map[string]int64{}
	var failures []error
	for i := range 30 * len(skus) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sku := skus[i%len(skus)]
			_, err := s.Reserve(ctx, sku, fmt.Sprintf("c-%d", i), 1)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				held[sku]++
			case !errors.Is(err, ErrOutOfStock):
				failures = append(failures, err)
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d reserves failed on the cluster, first: %v", len(failures), failures[0])
	}
	for _, sku := range skus {
		l, err := s.Level(ctx, sku)
		if err != nil {
			t.Fatal(err)
		}
		if held[sku] != perSKU || l.Held != perSKU || l.Available != 0 {
			t.Errorf("%s: %d reserves succeeded, level %+v; want exactly %d held", sku, held[sku], l, perSKU)
		}
	}

	// Release, commit, a lost SKU rebuilt, a reconcile, an operator change: all on one slot each.
	sku := skus[0]
	holds, err := s.Holds(ctx, sku)
	if err != nil || len(holds) != perSKU {
		t.Fatalf("holds of %s: %v %v", sku, holds, err)
	}
	if n, err := s.Release(ctx, sku, holds[0].CheckoutID); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if n, err := s.Commit(ctx, sku, holds[1].CheckoutID); err != nil || n != 1 {
		t.Fatalf("commit: %d %v", n, err)
	}
	if _, err := s.StageChange(ctx, sku, "ichg-cluster", 3, 5); err != nil {
		t.Fatalf("stage a change: %v", err)
	}
	if _, err := s.Release(ctx, sku, ChangeHoldID("ichg-cluster")); err != nil {
		t.Fatalf("finish the change: %v", err)
	}
	if r, err := s.Reconcile(ctx, sku, 12, nil, nil, 0); err != nil || !r.Stocked {
		t.Fatalf("reconcile: %+v %v", r, err)
	}
	if err := rdb.Del(ctx, StockKey(skus[1]), HoldsKey(skus[1])).Err(); err != nil {
		t.Fatal(err)
	}
	if _, rebuilt, err := s.Rebuild(ctx, skus[1], perSKU, 5, []Hold{{"c-1", 1}}, nil, 0); err != nil || !rebuilt {
		t.Fatalf("rebuild: %v %v", rebuilt, err)
	}

	// The gate reads every SKU of a cart across slots in one pipeline.
	items := map[string]int64{}
	for _, sku := range skus[1:] {
		items[sku] = 1
	}
	p, err := s.Precheck(ctx, "c-new", items)
	if err != nil {
		t.Fatalf("precheck across slots: %v", err)
	}
	// skus[1] was rebuilt with 9 available; every other is sold out.
	if !p.Known || len(p.Shortages) != len(skus)-2 || !p.SoldOut() {
		t.Errorf("precheck of %d SKUs on 3 masters: %+v; want all but %s short", len(items), p, skus[1])
	}
}

// masterOf is the address of the master that serves key's slot.
func masterOf(ctx context.Context, rdb *redis.ClusterClient, key string) (string, error) {
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	return testenv.SlotOwner(ctx, rdb, slot)
}

// TestHoldsGoOnWhileTheSKUsSlotMigrates: while a SKU's slot moves to another master (a
// reshard), every hold script keeps answering: on the source before the keys move, on the
// target (ASK) after. Every key a script declares exists, so it moves with the slot. With a
// per-checkout tombstone key, which usually does not exist, each script got TRYAGAIN until
// the migration ended.
func TestHoldsGoOnWhileTheSKUsSlotMigrates(t *testing.T) {
	rdb := testenv.RedisCluster(t, 3)
	ctx := t.Context()
	s := New(rdb)
	sku := "MIG-" + testenv.RandomID("")
	if _, err := s.SetStock(ctx, sku, 10, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, sku, "c-live", 1); err != nil {
		t.Fatal(err)
	}
	slot, err := rdb.ClusterKeySlot(ctx, StockKey(sku)).Result()
	if err != nil {
		t.Fatal(err)
	}
	phase := func(name string) {
		t.Helper()
		a, b, never := "c-"+name+"-a", "c-"+name+"-b", "c-"+name+"-never"
		if _, err := s.Reserve(ctx, sku, a, 1); err != nil {
			t.Fatalf("%s: reserve: %v", name, err)
		}
		if n, err := s.Release(ctx, sku, a); err != nil || n != 1 {
			t.Fatalf("%s: release = %d, %v", name, n, err)
		}
		if _, err := s.Reserve(ctx, sku, b, 2); err != nil {
			t.Fatalf("%s: reserve: %v", name, err)
		}
		if n, err := s.Commit(ctx, sku, b); err != nil || n != 2 {
			t.Fatalf("%s: commit = %d, %v", name, n, err)
		}
		if n, err := s.Release(ctx, sku, never); err != nil || n != 0 {
			t.Fatalf("%s: release before any reserve = %d, %v", name, n, err)
		}
		if _, err := s.Reserve(ctx, sku, never, 1); err == nil {
			t.Fatalf("%s: a late reserve after the release held units", name)
		}
		if p, err := s.Precheck(ctx, a, map[string]int64{sku: 1}); err != nil || !p.Seen {
			t.Fatalf("%s: precheck of an ended checkout = %+v, %v; want seen", name, p, err)
		}
		for _, k := range []string{StockKey(sku), HoldsKey(sku), HoldEndsKey(sku)} {
			if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 1 {
				t.Fatalf("%s: %s does not exist (%d, %v)", name, k, n, err)
			}
		}
	}

	phase("before")
	move := testenv.BeginSlotMove(t, rdb, slot)
	phase("source") // the keys are still on the source master
	if n := move.MoveKeys(t, 0); n != 3 {
		t.Fatalf("moved %d keys of slot %d, want the SKU's 3", n, slot)
	}
	// On the target the SKU was last resynced on another node: its first script refuses
	// until a resync (from Postgres: 4 units sold so far, c-live's hold open), as after a
	// failover. A slot move loses nothing, but the scripts cannot tell it from one that did.
	if _, err := s.Reserve(ctx, sku, "c-moved", 1); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("first reserve on the target: %v; want ErrRolledBack", err)
	}
	if _, err := s.Reconcile(ctx, sku, 10-2*2, []Hold{{"c-live", 1}}, nil, 0); err != nil {
		t.Fatal(err)
	}
	phase("target") // the source answers ASK, the target runs the scripts
	move.Finish(t)
	phase("after")

	l, err := s.Level(ctx, sku)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Level{Available: 10 - 1 - 4*2, Held: 1, MaxPerOrder: 5, Stocked: true, Gen: l.Gen}); l != want {
		t.Errorf("level after the migration = %+v, want %+v", l, want)
	}
	if got := fmt.Sprint(move.To.Exists(ctx, StockKey(sku)).Val()); got != "1" {
		t.Errorf("the stock key is not on the target master after the migration")
	}
}

// TestAFailoverKeepsTheScriptsLoaded: after a master fails over to a replica whose script
// cache is empty (a replica added or restarted after the start), the first call answers
// NOSCRIPT and every script is loaded again on every master, not only the one called.
func TestAFailoverKeepsTheScriptsLoaded(t *testing.T) {
	rdb := testenv.RedisClusterWithReplicas(t, 3, 1)
	ctx := t.Context()
	s := New(rdb)
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	sku := "FO-" + testenv.RandomID("")
	if _, err := s.SetStock(ctx, sku, 5, 5); err != nil {
		t.Fatal(err)
	}
	slot := rdb.ClusterKeySlot(ctx, StockKey(sku)).Val()
	promoted, _ := testenv.FailOver(t, rdb, slot, false)
	if err := promoted.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The first script on the new master runs (NOSCRIPT, then every script is loaded) and
	// refuses: the SKU was resynced on the old master. A resync, and holds go on.
	if _, err := s.Reserve(ctx, sku, "c-1", 1); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("first reserve on the new master: %v; want ErrRolledBack", err)
	}
	if _, err := s.Reconcile(ctx, sku, 5, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, sku, "c-1", 1); err != nil {
		t.Fatalf("reserve on the new master after the resync: %v", err)
	}
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		for _, sc := range allScripts {
			if ok := m.ScriptExists(ctx, sc.Hash()).Val(); len(ok) != 1 || !ok[0] {
				return fmt.Errorf("master %s lacks the %s script", m.Options().Addr, sc.name)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestAFailoverThatLostHoldsIsCaught: asynchronous replication acknowledges a hold the
// replica never got; the replica takes over and the hold is gone, its unit available again.
// The SKU's gen went back with it, so the next hold script refuses with ErrRolledBack
// instead of selling the unit twice; a reconcile from Postgres then restores the hold.
func TestAFailoverThatLostHoldsIsCaught(t *testing.T) {
	failOverLosingAHold(t, false)
}

// TestAFailoverThatLostHoldsIsCaughtByAnotherWorker: the worker that acts first on the new
// master saw the SKU only before the lost hold, so its gen check passes; the node check
// still refuses (the SKU was resynced on the old master), and it resyncs first.
func TestAFailoverThatLostHoldsIsCaughtByAnotherWorker(t *testing.T) {
	failOverLosingAHold(t, true)
}

func failOverLosingAHold(t *testing.T, otherWorker bool) {
	rdb := testenv.RedisClusterWithReplicas(t, 3, 1)
	ctx := t.Context()
	s := New(rdb)
	sku := "LOST-" + testenv.RandomID("")
	if _, err := s.SetStock(ctx, sku, 1, 1); err != nil {
		t.Fatal(err)
	}
	next := s
	if otherWorker { // a second worker, which saw the SKU's gen before the lost hold
		next = New(rdb)
		if _, err := next.Reserve(ctx, sku, "c-gone", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := next.Release(ctx, sku, "c-gone"); err != nil {
			t.Fatal(err)
		}
	}
	slot := rdb.ClusterKeySlot(ctx, StockKey(sku)).Val()
	testenv.FailOverLosingWrites(t, rdb, slot, func() {
		if _, err := s.Reserve(ctx, sku, "c-paid", 1); err != nil {
			t.Fatalf("reserve before the failover: %v", err)
		}
	})
	l, err := s.Level(ctx, sku)
	if err != nil || l.Held != 0 || l.Available != 1 {
		t.Fatalf("level after the lossy failover = %+v, %v; want the hold lost (the test lost no write)", l, err)
	}
	_, err = next.Reserve(ctx, sku, "c-other", 1)
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("reserve after the lossy failover: %v; want ErrRolledBack", err)
	}
	r, err := next.Reconcile(ctx, sku, 1, []Hold{{"c-paid", 1}}, nil, 0)
	if err != nil || r.Restored != 1 {
		t.Fatalf("reconcile = %+v, %v; want c-paid's hold restored", r, err)
	}
	if _, err := next.Reserve(ctx, sku, "c-other", 1); !errors.Is(err, ErrOutOfStock) {
		t.Errorf("reserve after the reconcile: %v; want out of stock (c-paid holds the unit)", err)
	}
}
