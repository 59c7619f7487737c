package faults

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
)

// TestSalesOnARedisCluster runs the suite's flash sale on a 3-master Redis Cluster with one
// replica each: the API in process and the worker process (REDIS_URL with addr= seeds) use
// go-redis' ClusterClient. While the sale runs, the hot SKU's slot is resharded to another
// master, then that master fails over to its replica, and then a master fails over to a
// replica cut off from it for a second, so holds the saga was told about are lost and the
// SKU's gen goes back: the hold scripts refuse (ErrRolledBack) until the activities resync
// the SKU from Postgres. Each sale ends with the
// invariants (never oversold; available + held == on_hand; holds of live checkouts only)
// and the audit clean.
func TestSalesOnARedisCluster(t *testing.T) {
	rdb := testenv.RedisClusterWithReplicas(t, 3, 1)
	s := newStackOn(t, rdb)

	// Each fault runs while a sale is on and returns what it did, for the report. A fault
	// that sends Redis back in time also brings back holds whose release it lost: a checkout
	// that ended after the resync counted it as open keeps one until the stock reconciler
	// ends it (its Schedule would, after its grace), as in TestSaleKeepsItsPromisesThroughStockFaults.
	faults := []struct {
		name      string
		inject    func(t *testing.T, sl *sale, hot string, slot int64) (during string)
		reconcile bool
	}{
		{"hot SKU's slot resharded", func(t *testing.T, sl *sale, hot string, slot int64) string {
			before := sl.post5xx.Load()
			move := testenv.BeginSlotMove(t, rdb, slot)
			time.Sleep(time.Second) // importing/migrating, keys on the source
			moved := move.MoveKeys(t, 0)
			time.Sleep(time.Second) // keys on the target, the source answers ASK
			move.Finish(t)
			return fmt.Sprintf("slot %d of %s moved from %s to %s (%d keys), %d POSTs answered 5xx during the migration",
				slot, hot, move.From.Options().Addr, move.To.Options().Addr, moved, sl.post5xx.Load()-before)
		}, false},
		{"hot SKU's master failed over", func(t *testing.T, sl *sale, hot string, slot int64) string {
			before := sl.post5xx.Load()
			at := time.Now()
			promoted, old := testenv.FailOver(t, rdb, slot, false)
			return fmt.Sprintf("master %s of %s (slot %d) failed over to %s in %s, %d POSTs answered 5xx meanwhile",
				old.Options().Addr, hot, slot, promoted.Options().Addr, time.Since(at).Round(time.Millisecond), sl.post5xx.Load()-before)
		}, false},
		{"hot SKU's master failed over losing a second of writes", func(t *testing.T, sl *sale, hot string, slot int64) string {
			var lostGen, keptGen int64
			promoted := testenv.FailOverLosingWrites(t, rdb, slot, func() {
				time.Sleep(time.Second) // the sale goes on against the cut-off master
				lostGen, _ = rdb.HGet(t.Context(), lua.StockKey(hot), "gen").Int64()
			})
			keptGen, _ = rdb.HGet(t.Context(), lua.StockKey(hot), "gen").Int64()
			if keptGen >= lostGen {
				t.Errorf("the failover lost no change of %s (gen %d, then %d): the test proves nothing", hot, lostGen, keptGen)
			}
			return fmt.Sprintf("%s (slot %d) failed over to %s, which lacks the last second of writes: gen %d before, %d after",
				hot, slot, promoted.Options().Addr, lostGen, keptGen)
		}, true},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			sl := newSale(s, saleCarts, saleUnits)
			hot := sl.skus()[len(sl.skus())-1] // "PHONE-<run>": every cart wants it
			slot := rdb.ClusterKeySlot(t.Context(), lua.StockKey(hot)).Val()
			var during string
			started := time.Now()
			sl.play(t, trigger, func() { during = f.inject(t, sl, hot, slot) })
			if f.reconcile {
				s.reconcileUntilClean(t, sl)
			}
			sl.report(t, started, during)
		})
	}
}

// clusterURL is the REDIS_URL of a cluster: its first node, and the others as addr= seeds
// (cmd/checkout's newRedis).
func clusterURL(rdb *redis.ClusterClient) string {
	addrs := rdb.Options().Addrs
	q := url.Values{}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	return (&url.URL{Scheme: "redis", Host: addrs[0], RawQuery: q.Encode()}).String()
}
