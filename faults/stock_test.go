package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// TestSaleKeepsItsPromisesThroughStockFaults runs the flash sale of the service faults
// (faults_test.go) through the stock faults: Redis going back to an earlier copy, operators
// changing stock while it sells, a PUT right after Redis lost everything, and the stock
// reconciler running in the middle of it. Each ends like the service faults: every paid 201
// confirmed (so no paid holder was refunded for lack of stock) and the invariants of
// sale.violations (sold + on_hand == the ledger's sum == units stocked, available + held ==
// on_hand at rest, no hold left by an ended checkout).
func TestSaleKeepsItsPromisesThroughStockFaults(t *testing.T) {
	t.Parallel() // its own stack (newStack)
	s := newStack(t)

	t.Run("redis rolled back to a snapshot mid-sale", func(t *testing.T) {
		sl := newSale(s, saleCarts, saleUnits)
		var lost int
		started := time.Now()
		// The copy is taken at a random point of the sale's first third (while the room has
		// a line and units are still free), and Redis goes back to it once a random number of
		// checkouts ended since (holds committed and released, carts taken from the line).
		at, ends := 1+rand.IntN(trigger), 1+rand.IntN(20)
		t.Logf("redis is copied after %d answers, and goes back to the copy %d ends later", at, ends)
		sl.play(t, at, func() {
			snap := s.snapshot(t, sl.skus())
			before := sl.endedCount(t)
			_ = waitFor(clientDeadline, func() error {
				if sl.endedCount(t) >= before+ends {
					return nil
				}
				return errNotYet
			})
			lost = s.restoreSnapshot(t, sl.skus(), snap)
		})
		// Holds of checkouts that ended after the snapshot came back with it: the reconciler
		// ends them (its Schedule would, after its grace).
		s.reconcileUntilClean(t, sl)
		sl.report(t, started, fmt.Sprintf("redis went back to a copy taken %d ends earlier (%d keys of the sale and its waiting room rolled back)", ends, lost))
		sl.logMoney(t)
		sl.noRecordedCartQueued(t)
	})

	t.Run("adjustments and If-Match PUTs while the sale runs", func(t *testing.T) {
		s.saleWith(t, trigger/2, func(sl *sale) string {
			var done []string
			var wg sync.WaitGroup
			var mu sync.Mutex
			for i, sku := range sl.skus() {
				wg.Add(2)
				go func() {
					defer wg.Done()
					// A restock, retried with its key as a client would after a timeout.
					key := fmt.Sprintf("restock-%s-%d", sl.run, i)
					for range 3 {
						if code := s.adjust(t, sku, key, 5, "restock"); code != http.StatusOK {
							t.Errorf("adjust %s +5: %d", sku, code)
						}
					}
					mu.Lock()
					sl.stock[sku] += 5
					done = append(done, "+5 "+sku+" (3 deliveries of one key)")
					mu.Unlock()
				}()
				go func() {
					defer wg.Done()
					// GET, then PUT on_hand + 3 with If-Match, again on 412 (a sale moved it).
					tries, delta := s.putIfMatch(t, sku, func(v shop.InventoryView) int64 { return v.OnHand + 3 })
					mu.Lock()
					sl.stock[sku] += delta
					done = append(done, fmt.Sprintf("PUT on_hand+3 of %s after %d tries", sku, tries))
					mu.Unlock()
				}()
			}
			wg.Wait()
			return "operator changes during the sale: " + strings.Join(done, "; ")
		})
	})

	t.Run("a PUT right after redis lost everything", func(t *testing.T) {
		s.saleWith(t, trigger, func(sl *sale) string {
			var puts []string
			s.redis.kill()
			s.redis.start() // empty: the suite's Redis keeps nothing
			for _, sku := range sl.skus() {
				// The same stock with a new price: the open checkouts' holds must survive.
				tries, delta := s.putIfMatch(t, sku, func(v shop.InventoryView) int64 { return v.OnHand })
				puts = append(puts, fmt.Sprintf("%s after %d tries (delta %d)", sku, tries, delta))
				sl.stock[sku] += delta
			}
			return "redis restarted empty, then PUT " + strings.Join(puts, ", ")
		})
	})

	t.Run("redis restarted from its RDB snapshot, the worker with it", func(t *testing.T) {
		// Every holder pays at once, so a unit granted twice is paid twice.
		sl := newSale(s, saleCarts, saleUnits, rolePay)
		started := time.Now()
		sl.play(t, 3, func() {
			// Redis's default persistence: a snapshot now and then. The host reboots 15
			// answers later; Redis loads the snapshot, and the worker starts remembering
			// nothing, so only what Redis and Postgres hold can tell it what was lost.
			if err := s.rdb.Save(context.Background()).Err(); err != nil {
				t.Errorf("save redis: %v", err)
			}
			_ = waitFor(clientDeadline, func() error {
				if int(sl.answered.Load()) >= 3+15 {
					return nil
				}
				return errNotYet
			})
			s.worker.kill()
			s.redis.kill() // SIGKILL: what came after the snapshot is gone
			s.redis.start()
			// Later restarts of this suite's Redis start empty, as the machine's does.
			if err := os.Remove(filepath.Join(s.redis.dir, "dump.rdb")); err != nil {
				t.Errorf("remove the snapshot: %v", err)
			}
			s.worker.start()
		})
		s.reconcileUntilClean(t, sl)
		sl.report(t, started, "redis restarted from a snapshot taken 15 answers earlier, the worker with it")
		sl.logMoney(t)
	})

	t.Run("the stock reconciler triggered mid-sale", func(t *testing.T) {
		s.saleWith(t, trigger/2, func(*sale) string {
			var runs []string
			for range 4 {
				res, err := s.reconcileStock(0)
				if err != nil {
					t.Errorf("reconcile stock: %v", err)
					break
				}
				runs = append(runs, fmt.Sprintf("%d corrections, %d unexplained", len(res.Corrections), len(res.Unexplained)))
			}
			return "stock reconciler ran 4 times during the sale: " + strings.Join(runs, "; ")
		})
	})
}

// saleWith plays a sale with fault run once trigger carts have their answer, then reports
// it with what fault says it did and logs the money.
func (s *stack) saleWith(t *testing.T, trigger int, fault func(sl *sale) string) {
	sl, started := newSale(s, saleCarts, saleUnits), time.Now()
	var what string
	sl.play(t, trigger, func() { what = fault(sl) })
	sl.report(t, started, what)
	sl.logMoney(t)
}

// snapshot copies every Redis key of the SKUs, as the copy a Redis may restart from.
func (s *stack) snapshot(t *testing.T, skus []string) map[string]string {
	snap := map[string]string{}
	for _, k := range s.skuKeys(t, skus) {
		if d, err := s.rdb.Dump(context.Background(), k).Result(); err == nil {
			snap[k] = d
		}
	}
	return snap
}

// endedCount is how many of the sale's checkouts Postgres holds as ended.
func (sl *sale) endedCount(t *testing.T) int {
	var n int
	if err := sl.s.pool.QueryRow(context.Background(), `SELECT count(*) FROM checkouts WHERE checkout_id LIKE $1 AND ended_at IS NOT NULL`,
		"c-"+sl.run+"-%").Scan(&n); err != nil {
		t.Errorf("count the sale's ends: %v", err)
	}
	return n
}

// roomKeys are the keys of the API's waiting room (one hash tag): Redis going back in time
// takes them back with the stock.
const roomKeys = "room:{" + lua.DefaultRoomName + "}:*"

// noRecordedCartQueued checks that every cart of the sale Postgres recorded (its saga's, or
// its end) is answered by its saga or Postgres, never "queued" by a room that went back in
// time and put it back in line.
func (sl *sale) noRecordedCartQueued(t *testing.T) {
	rows, err := sl.s.pool.Query(context.Background(), `SELECT checkout_id FROM checkouts WHERE checkout_id LIKE $1`, "c-"+sl.run+"-%")
	if err != nil {
		t.Fatalf("read recorded carts: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read recorded carts: %v", err)
	}
	for _, id := range ids {
		var v struct {
			Status string `json:"status"`
		}
		code, _, err := sl.s.do(http.MethodGet, "/v1/checkouts/"+id, nil, checkouttest.BuyerOf(id), &v)
		if err != nil || v.Status == "queued" || v.Status == "waiting_for_sale" {
			t.Errorf("GET of %s, recorded in postgres, after redis went back in time: %d %q %v", id, code, v.Status, err)
		}
	}
	t.Logf("%d carts recorded in postgres, none answered from the waiting room", len(ids))
}

// restoreSnapshot puts the SKUs' keys back as they were in snap (keys written since are
// gone), as a restart from that copy or a failover to a replica that far behind would. It
// returns the number of keys that differ.
func (s *stack) restoreSnapshot(t *testing.T, skus []string, snap map[string]string) int {
	ctx := context.Background()
	changed := 0
	pipe := s.rdb.TxPipeline()
	for _, k := range s.skuKeys(t, skus) {
		if d, err := s.rdb.Dump(ctx, k).Result(); err != nil || d != snap[k] {
			changed++
		}
		pipe.Del(ctx, k)
	}
	for k, d := range snap {
		pipe.RestoreReplace(ctx, k, 0, d)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Errorf("restore the snapshot: %v", err)
	}
	return changed
}

// skuKeys are the keys of the SKUs and of the waiting room, which a snapshot takes together.
func (s *stack) skuKeys(t *testing.T, skus []string) []string {
	keys, err := s.rdb.Keys(context.Background(), roomKeys).Result()
	if err != nil && err != redis.Nil {
		t.Errorf("list the waiting room's keys: %v", err)
	}
	for _, sku := range skus {
		ks, err := s.rdb.Keys(context.Background(), "*{"+sku+"}*").Result()
		if err != nil && err != redis.Nil {
			t.Errorf("list keys of %s: %v", sku, err)
		}
		keys = append(keys, ks...)
	}
	return keys
}

// reconcileUntilClean runs the stock reconciler (with a grace of a second) until no hold of
// an ended checkout is left, as its Schedule would over the next runs.
func (s *stack) reconcileUntilClean(t *testing.T, sl *sale) {
	err := waitFor(settleBy, func() error {
		if _, err := s.reconcileStock(1); err != nil {
			return err
		}
		for _, b := range sl.violations(context.Background()) {
			if strings.Contains(b, "which ended") {
				return fmt.Errorf("%s", b)
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("holds of ended checkouts left after reconciling: %v", err)
	}
}

// adjust posts an adjustment and returns the status.
func (s *stack) adjust(t *testing.T, sku, key string, delta int64, reason string) int {
	b, _ := json.Marshal(map[string]any{"delta": delta, "reason": reason})
	var code int
	err := waitFor(clientDeadline, func() error {
		var err error
		code, _, err = s.do(http.MethodPost, "/v1/inventory/"+sku+"/adjustments", b,
			map[string]string{"Authorization": "Bearer " + adminToken, "Idempotency-Key": key}, nil)
		if err != nil || code >= 500 {
			return fmt.Errorf("adjust %s: %d %v", sku, code, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	return code
}

// putIfMatch reads a SKU and PUTs want(view) as its on_hand with If-Match and a new price,
// reading again after a 412 (a sale changed it meanwhile). It returns the tries and the
// change of on_hand it made.
func (s *stack) putIfMatch(t *testing.T, sku string, want func(shop.InventoryView) int64) (int, int64) {
	admin := map[string]string{"Authorization": "Bearer " + adminToken}
	tries := 0
	var delta int64
	err := waitFor(clientDeadline, func() error {
		tries++
		var v shop.InventoryView
		code, hdr, err := s.do(http.MethodGet, "/v1/inventory/"+sku, nil, admin, &v)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("get %s: %d %v", sku, code, err)
		}
		onHand := want(v)
		// The price stays the sale's: the buyers pay what their carts cost at it.
		b, _ := json.Marshal(map[string]any{"on_hand": onHand, "price_cents": unitPrice, "currency": "usd", "max_per_order": 2})
		code, _, err = s.do(http.MethodPut, "/v1/inventory/"+sku, b,
			map[string]string{"Authorization": "Bearer " + adminToken, "If-Match": hdr.Get("ETag")}, nil)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("put %s: %d %v", sku, code, err)
		}
		delta = onHand - v.OnHand
		return nil
	})
	if err != nil {
		t.Errorf("PUT with If-Match never went through: %v", err)
	}
	return tries, delta
}

// logMoney logs the sale's money figures: carts held, paid, confirmed and refunded.
func (sl *sale) logMoney(t *testing.T) {
	var paid, confirmed, paidNotConfirmed int
	for _, c := range sl.winner {
		if c.paid {
			paid++
			if c.final == "confirmed" {
				confirmed++
			} else {
				paidNotConfirmed++
			}
		}
	}
	var refunded int64
	_ = sl.s.pool.QueryRow(context.Background(), `SELECT count(DISTINCT checkout_id) FROM refunds WHERE checkout_id LIKE $1`, "c-"+sl.run+"-%").Scan(&refunded)
	t.Logf("money: %d held, %d paid, %d confirmed, %d refunded; %d paid but not confirmed", len(sl.winner), paid, confirmed, refunded, paidNotConfirmed)
	if paidNotConfirmed > 0 {
		t.Errorf("%d paid holders were not confirmed", paidNotConfirmed)
	}
}
