package activities

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
)

// 10 of 20 units held, Redis loses everything, an operator PUTs the same
// stock (a price change). The open checkouts' units must stay held, not become available.
func TestInventorySetAfterRedisLostEverythingKeepsOpenHolds(t *testing.T) {
	f := newRecoveryFixture(t)
	ctx := t.Context()
	f.stock(20, 100, 5)
	f.checkout(5)
	f.checkout(5)
	testRedis(t).Del(ctx, lua.StockKey(f.sku), lua.HoldsKey(f.sku))
	f.stock(20, 250, 5)
	if v := f.level(); v.Held != 10 || v.Available != 10 || v.PriceCents != 250 {
		t.Fatalf("after a PUT on an empty redis: %+v; want held 10 (the open checkouts), available 10", v)
	}
}

// Redis lost a live hold (a failover to a lagging replica), then the stock
// reconciler ran. It must restore the hold of the open checkout, not publish its unit.
func TestReconcileStockRestoresLostHolds(t *testing.T) {
	f := newRecoveryFixture(t)
	ctx := t.Context()
	f.lostHold(1) // the write the failover lost
	if _, err := f.actEv.ExecuteActivity(f.acts.ReconcileStock, steps.ReconcileStockInput{}); err != nil {
		t.Fatal(err)
	}
	if v := f.level(); v.Available != 0 || v.Held != 1 {
		t.Fatalf("after reconcile: %+v; want a's hold restored (available 0, held 1)", v)
	}
	b := randomID("c-")
	if _, err := f.acts.RecordCheckout(ctx, steps.RecordCheckoutInput{CheckoutID: b, CustomerID: "u-2", Items: []shop.Item{{SKU: f.sku, Quantity: 1}}}); err != nil {
		t.Fatal(err)
	}
	_, err := f.actEv.ExecuteActivity(f.acts.ReserveStock, steps.StockInput{CheckoutID: b, SKU: f.sku, Quantity: 1})
	requireAppError(t, err, shop.ErrTypeOutOfStock)
}

// Redis went back to a copy from before the last holds (a restart from an older snapshot):
// the next reserve must be judged on every open checkout, not on the old copy.
func TestReserveAfterRedisWentBackInTime(t *testing.T) {
	f := newRecoveryFixture(t)
	ctx := t.Context()
	f.stock(3, 100, 1)
	rdb := testRedis(t)
	snapshot := dumpKeys(t, rdb, f.sku)
	for range 3 {
		id := randomID("c-")
		if _, err := f.acts.RecordCheckout(ctx, steps.RecordCheckoutInput{CheckoutID: id, CustomerID: "u-1", Items: []shop.Item{{SKU: f.sku, Quantity: 1}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.actEv.ExecuteActivity(f.acts.ReserveStock, steps.StockInput{CheckoutID: id, SKU: f.sku, Quantity: 1}); err != nil {
			t.Fatal(err)
		}
	}
	restoreKeys(t, rdb, snapshot)
	late := randomID("c-")
	if _, err := f.acts.RecordCheckout(ctx, steps.RecordCheckoutInput{CheckoutID: late, CustomerID: "u-2", Items: []shop.Item{{SKU: f.sku, Quantity: 1}}}); err != nil {
		t.Fatal(err)
	}
	_, err := f.actEv.ExecuteActivity(f.acts.ReserveStock, steps.StockInput{CheckoutID: late, SKU: f.sku, Quantity: 1})
	requireAppError(t, err, shop.ErrTypeOutOfStock)
	if v := f.level(); v.Available+v.Held != v.OnHand {
		t.Errorf("after the resync: %+v; want available + held == on_hand", v)
	}
}

// A commit that finds no hold (Redis lost it) must be flagged, and the
// phantom unit Redis still counts as available must be taken back.
func TestCommitStockWithoutHoldRepairsAndFlags(t *testing.T) {
	f := newRecoveryFixture(t)
	ctx := t.Context()
	a := f.lostHold(2)
	if err := f.confirm(ctx, a); err != nil {
		t.Fatal(err)
	}
	_, err := f.actEv.ExecuteActivity(f.acts.CommitStock, steps.StockInput{CheckoutID: a, SKU: f.sku, Quantity: 1})
	requireAppError(t, err, shop.ErrTypeNoHold)
	if v := f.level(); v.OnHand != 1 || v.Available != 1 || v.Held != 0 {
		t.Errorf("after the commit without a hold: %+v; want on_hand 1 == available 1", v)
	}
}

// A confirm refused for lack of stock must not return units: the loser's hold is forfeited.
func TestForfeitStockReturnsNoUnits(t *testing.T) {
	f := newRecoveryFixture(t)
	ctx := t.Context()
	a := f.lostHold(1) // Redis lost a's hold; the unit is sold again to b below
	b := randomID("c-")
	if _, err := f.acts.RecordCheckout(ctx, steps.RecordCheckoutInput{CheckoutID: b, CustomerID: "u-2", Items: []shop.Item{{SKU: f.sku, Quantity: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.acts.Stock.Reserve(ctx, f.sku, b, 1); err != nil {
		t.Fatal(err)
	}
	// Both pay; a is confirmed, b's order is refused (on_hand 0).
	for _, id := range []string{a, b} {
		err := f.confirm(ctx, id)
		if id == b && !errors.Is(err, store.ErrInsufficientOnHand) {
			t.Fatalf("confirm of b: %v; want insufficient on hand", err)
		}
	}
	val, err := f.actEv.ExecuteActivity(f.acts.ForfeitStock, steps.StockInput{CheckoutID: b, SKU: f.sku, Quantity: 1, Reason: "failed"})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := val.Get(&n); err != nil || n != 1 {
		t.Errorf("forfeit: %d, %v; want 1", n, err)
	}
	if v := f.level(); v.OnHand != 0 || v.Available != 0 {
		t.Errorf("after forfeit: %+v; want nothing available (on_hand 0)", v)
	}
	// Repeated, or followed by the saga's release: nothing more changes.
	if _, err := f.actEv.ExecuteActivity(f.acts.ForfeitStock, steps.StockInput{CheckoutID: b, SKU: f.sku, Quantity: 1}); err != nil {
		t.Error(err)
	}
	if _, err := f.actEv.ExecuteActivity(f.acts.ReleaseStock, steps.StockInput{CheckoutID: b, SKU: f.sku, Quantity: 1}); err != nil {
		t.Error(err)
	}
	if v := f.level(); v.Available != 0 {
		t.Errorf("after a release of the forfeited hold: %+v; want nothing available", v)
	}
}

// Inventory.Set must not hold the SKU's row lock across a Redis call. With
// Redis stalled inside Set, an order confirmation of the same SKU must go through.
func TestInventorySetHoldsNoRowLockAcrossRedis(t *testing.T) {
	f := newRecoveryFixture(t)
	ctx := t.Context()
	a := f.checkout(1)

	stall := &stallHook{entered: make(chan struct{}), release: make(chan struct{})}
	opts, _ := redis.ParseURL(testenv.RedisURL())
	slow := redis.NewClient(opts)
	t.Cleanup(func() { _ = slow.Close() })
	slow.AddHook(stall)
	inv := &inventory.Inventory{Store: f.acts.Store, Stock: lua.New(slow)}
	setDone := make(chan error, 1)
	go func() {
		_, err := inv.Set(context.Background(), shop.Product{SKU: f.sku, OnHand: 12, SaleTerms: shop.SaleTerms{PriceCents: 100, Currency: "usd", MaxPerOrder: 5}})
		setDone <- err
	}()
	select {
	case <-stall.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Set never called Redis")
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := f.confirm(cctx, a)
	stall.open()
	if err != nil {
		t.Errorf("confirm while Set waits on redis: %v; want it not blocked by Set", err)
	}
	if err := <-setDone; err != nil {
		t.Fatalf("set: %v", err)
	}
	// The set meant "12 on hand" and the sale happened between its read and its write.
	if _, err := f.acts.Stock.Commit(ctx, f.sku, a); err != nil {
		t.Fatal(err)
	}
	if v := f.level(); v.Available+v.Held != v.OnHand {
		t.Errorf("after set and sale: %+v; want available + held == on_hand", v)
	}
}

// stallHook blocks the first script call until open.
type stallHook struct {
	once     sync.Once
	entered  chan struct{}
	release  chan struct{}
	released sync.Once
}

func (h *stallHook) open() { h.released.Do(func() { close(h.release) }) }

func (h *stallHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			first := false
			h.once.Do(func() { first = true; close(h.entered) })
			if first {
				<-h.release
			}
		}
		return next(ctx, cmd)
	}
}

func (h *stallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// dumpKeys copies a SKU's stock and holds keys, as a snapshot Redis could restart from.
func dumpKeys(t *testing.T, rdb *redis.Client, sku string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range []string{lua.StockKey(sku), lua.HoldsKey(sku)} {
		d, err := rdb.Dump(t.Context(), k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		out[k] = d
	}
	return out
}

func restoreKeys(t *testing.T, rdb *redis.Client, dump map[string]string) {
	t.Helper()
	for k, d := range dump {
		rdb.Del(t.Context(), k)
		if d != "" {
			if err := rdb.Restore(t.Context(), k, 0, d).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A failover lost the release of a checkout that had ended (its end is in Postgres), and the
// SKU's gen went back with it. No saga touches the SKU again (the sale is over), so the stock
// reconciler is what ends that hold. Its own release of the leftover hold is refused
// (ErrRolledBack: this process saw a higher gen); that must not stop the run before the
// resync that repairs the SKU (CI: the lossy-failover cluster sale kept such holds).
func TestReconcileStockEndsHoldsOfEndedCheckoutsAfterRedisWentBack(t *testing.T) {
	f := newRecoveryFixture(t)
	ctx := t.Context()
	f.stock(3, 100, 1)
	rdb := testRedis(t)
	a := f.checkout(1)
	snapshot := dumpKeys(t, rdb, f.sku) // the replica's copy: a's hold, not its release
	if _, err := f.acts.RecordOutcome(ctx, steps.RecordOutcomeInput{CheckoutID: a, Status: string(shop.StatusExpired), Reason: "no payment"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.actEv.ExecuteActivity(f.acts.ReleaseStock, steps.StockInput{CheckoutID: a, SKU: f.sku, Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	restoreKeys(t, rdb, snapshot)
	time.Sleep(1100 * time.Millisecond) // past the reconciler's grace of a second
	if _, err := f.actEv.ExecuteActivity(f.acts.ReconcileStock, steps.ReconcileStockInput{GraceSeconds: 1}); err != nil {
		t.Fatalf("reconcile after redis went back: %v", err)
	}
	holds, err := f.acts.Stock.Holds(ctx, f.sku)
	if err != nil {
		t.Fatal(err)
	}
	if len(holds) != 0 {
		t.Errorf("holds after reconcile: %+v; want none (a ended expired)", holds)
	}
	if v := f.level(); v.Available != 3 || v.Held != 0 {
		t.Errorf("after reconcile: %+v; want all 3 units available, none held", v)
	}
}
