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
	t.Parallel() // its own cluster and stack (newStackOn)
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
			// cutGen is the hot SKU's gen once the replica is cut off: the most the replica, and
			// so the promoted master, can know. lostGen is the cut-off master's at the takeover.
			var cutGen, lostGen int64
			promoted := testenv.FailOverLosingWrites(t, rdb, slot, func() {
				// The sale goes on against the cut-off master for a second, and at least until
				// the product changed the hot SKU there once (an expiry, a payment's commit): a
				// sale that is quiet at that moment would otherwise lose nothing.
				gen := func() int64 { g, _ := rdb.HGet(t.Context(), lua.StockKey(hot), "gen").Int64(); return g }
				cutGen = gen()
				until := time.Now().Add(time.Second)
				for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
					if lostGen = gen(); lostGen > cutGen && time.Now().After(until) {
						break
					}
				}
			})
			if lostGen <= cutGen {
				t.Errorf("the failover lost no change of %s (gen %d when the replica was cut off, %d at the takeover): the test proves nothing", hot, cutGen, lostGen)
			}
			return fmt.Sprintf("%s (slot %d) failed over to %s, which lacks the writes made while it was cut off: gen %d there at most, %d on the old master",
				hot, slot, promoted.Options().Addr, cutGen, lostGen)
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
