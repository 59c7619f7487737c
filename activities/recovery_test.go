package activities

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/testsuite"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
)

// recoveryFixture: a SKU with 10 on hand in Postgres and Redis, and helpers to create
// checkouts with holds in any state.
type recoveryFixture struct {
	t     *testing.T
	acts  *Activities
	pool  *pgxpool.Pool
	sku   string
	inv   *inventory.Inventory
	actEv *testsuite.TestActivityEnvironment
}

func newRecoveryFixture(t *testing.T) *recoveryFixture {
	pool, rdb := testDB(t), testRedis(t)
	db, stockRedis := store.New(pool), lua.New(rdb)
	f := &recoveryFixture{t: t, acts: &Activities{Store: db, Stock: stockRedis}, pool: pool, sku: randomID("REC-"),
		inv: &inventory.Inventory{Store: db, Stock: stockRedis}}
	t.Cleanup(func() { rdb.Del(t.Context(), lua.StockKey(f.sku), lua.HoldsKey(f.sku)) })
	f.stock(10, 100, 5)
	var s testsuite.WorkflowTestSuite
	f.actEv = s.NewTestActivityEnvironment()
	f.actEv.RegisterActivity(f.acts)
	return f
}

// checkout records an open checkout of qty units and holds them in Redis.
func (f *recoveryFixture) checkout(qty int64) string {
	id := randomID("c-")
	if _, err := f.acts.RecordCheckout(f.t.Context(), steps.RecordCheckoutInput{CheckoutID: id, CustomerID: "u-1", Items: []shop.Item{{SKU: f.sku, Quantity: qty}}}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.acts.Stock.Reserve(f.t.Context(), f.sku, id, qty); err != nil {
		f.t.Fatal(err)
	}
	return id
}

// stock sets the SKU through the operators' service: onHand units at priceCents (usd), at
// most maxPerOrder per order.
func (f *recoveryFixture) stock(onHand, priceCents, maxPerOrder int64) {
	f.t.Helper()
	if _, err := f.inv.Set(f.t.Context(), shop.Product{SKU: f.sku, OnHand: onHand, SaleTerms: shop.SaleTerms{PriceCents: priceCents, Currency: "usd", MaxPerOrder: maxPerOrder}}); err != nil {
		f.t.Fatal(err)
	}
}

// loseHold makes Redis forget the hold of checkout as a failover to a lagging replica does:
// the hold is gone and the stock hash reads available units and none held.
func (f *recoveryFixture) loseHold(checkout string, available int64) {
	rdb := testRedis(f.t)
	rdb.HDel(f.t.Context(), lua.HoldsKey(f.sku), checkout)
	rdb.HSet(f.t.Context(), lua.StockKey(f.sku), "available", available, "held", 0)
}

// lostHold stocks onHand units (at most one per order), holds one for a new checkout, and
// makes Redis lose that hold (loseHold): all onHand units read available. It returns the
// checkout.
func (f *recoveryFixture) lostHold(onHand int64) string {
	f.stock(onHand, 100, 1)
	a := f.checkout(1)
	f.loseHold(a, onHand)
	return a
}

// confirm confirms the order of checkout's one unit in Postgres, as the saga does once paid.
func (f *recoveryFixture) confirm(ctx context.Context, checkout string) error {
	return f.confirmUnits(ctx, checkout, 1)
}

// confirmUnits records the payment of checkout's units, as the webhook does, and confirms
// their order in Postgres.
func (f *recoveryFixture) confirmUnits(ctx context.Context, checkout string, units int64) error {
	in := steps.ConfirmOrderInput{CheckoutID: checkout, CustomerID: "u-1", Items: []shop.Item{{SKU: f.sku, Quantity: units, UnitPriceCents: 100}},
		AmountCents: 100 * units, Currency: "usd", PaymentProvider: "stripe", PaymentRef: "pi_" + checkout}
	if _, err := f.acts.Store.RecordPaymentEvent(ctx, verifiedEvent(in)); err != nil {
		return err
	}
	_, _, err := f.acts.Store.ConfirmOrder(ctx, store.Order(in))
	return err
}

func (f *recoveryFixture) level() shop.InventoryView {
	v, err := f.inv.Get(f.t.Context(), f.sku)
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

func TestReserveRebuildsStockRedisLost(t *testing.T) {
	f := newRecoveryFixture(t)
	open := f.checkout(3)
	rdb := testRedis(t)
	// Redis restarts empty.
	rdb.Del(t.Context(), lua.StockKey(f.sku), lua.HoldsKey(f.sku))

	_, err := f.actEv.ExecuteActivity(f.acts.ReserveStock, steps.StockInput{CheckoutID: "c-after-restart", SKU: f.sku, Quantity: 2})
	if err != nil {
		t.Fatalf("reserve after redis lost the sku: %v", err)
	}
	v := f.level()
	// The open checkout's hold came back from Postgres before the new hold was taken.
	if v.Held != 5 || v.Available != 5 || v.OnHand != 10 {
		t.Errorf("after rebuild: %+v, want held 5 (3 rebuilt + 2 new), available 5", v)
	}
	if n, err := f.acts.Stock.Release(t.Context(), f.sku, open); err != nil || n != 3 {
		t.Errorf("release of the rebuilt hold: %d, %v; want 3 units back", n, err)
	}
}

func TestReconcileStockRepairsAndFlags(t *testing.T) {
	f := newRecoveryFixture(t)
	ctx := t.Context()
	pool := f.pool
	f.checkout(2) // a live checkout: its hold must survive
	expired := f.checkout(3)
	confirmed := f.checkout(1)
	// expired ended long ago but its release never ran (a lost worker, say).
	if err := f.acts.Store.RecordOutcome(ctx, store.Outcome{CheckoutID: expired, Status: "expired"}); err != nil {
		t.Fatal(err)
	}
	// confirmed was confirmed in Postgres, but its hold was never committed.
	if err := f.confirm(ctx, confirmed); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE checkouts SET ended_at = now() - interval '1 hour' WHERE checkout_id = ANY($1)`, []string{expired, confirmed}); err != nil {
		t.Fatal(err)
	}
	// A hold by a checkout Postgres never heard of, and drift in available.
	if _, err := f.acts.Stock.Reserve(ctx, f.sku, "c-stranger", 1); err != nil {
		t.Fatal(err)
	}
	testRedis(t).HSet(ctx, lua.StockKey(f.sku), "available", 7)

	val, err := f.actEv.ExecuteActivity(f.acts.ReconcileStock, steps.ReconcileStockInput{GraceSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	var res steps.ReconcileStockResult
	if err := val.Get(&res); err != nil {
		t.Fatal(err)
	}

	v := f.level()
	// on_hand 9 (one sold); still held: live 2 + stranger 1.
	if v.OnHand != 9 || v.Held != 3 || v.Available != 6 {
		t.Errorf("after reconcile: %+v, want on_hand 9, held 3, available 6", v)
	}
	holds, _ := f.acts.Stock.Holds(ctx, f.sku)
	for _, h := range holds {
		if h.CheckoutID == expired || h.CheckoutID == confirmed {
			t.Errorf("hold of ended checkout %s survived", h.CheckoutID)
		}
	}
	if len(res.Unexplained) != 1 || !strings.Contains(res.Unexplained[0], "c-stranger") {
		t.Errorf("unexplained %v, want the stranger's hold", res.Unexplained)
	}
	notes := testenv.Count(t, pool, `SELECT count(*) FROM inventory_ledger WHERE sku = $1 AND reason LIKE 'reconcile:%'`, f.sku)
	if notes != 3 || len(res.Corrections) != 3 {
		t.Errorf("%d ledger notes, corrections %v; want 3 (release, commit, available)", notes, res.Corrections)
	}
	// A second run finds nothing more to do.
	val, err = f.actEv.ExecuteActivity(f.acts.ReconcileStock, steps.ReconcileStockInput{GraceSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if err := val.Get(&res); err != nil || len(res.Corrections) != 0 {
		t.Errorf("second run corrections %v (err %v), want none", res.Corrections, err)
	}
}
