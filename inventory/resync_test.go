package inventory

import (
	"testing"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// A resync (a reconcile under the SKU's row lock) can run between the steps of an operator's
// change: Postgres already moved on_hand (or not yet), Redis has not finished the change's
// hold. Finishing it must still leave available + held == on_hand. The activities' tests
// prove the same for a checkout's hold (TestResyncBetweenConfirmAndCommitKeepsTheUnits).

// changeFixture is a SKU with 10 on hand, set through the Inventory, in Postgres and Redis.
type changeFixture struct {
	t   *testing.T
	inv *Inventory
	sku string
}

func newChangeFixture(t *testing.T) *changeFixture {
	_, pool := testenv.Postgres(t)
	rdb := testenv.Redis(t)
	f := &changeFixture{t: t, inv: &Inventory{Store: store.New(pool), Stock: lua.New(rdb)}, sku: testenv.RandomID("CHG-")}
	t.Cleanup(func() { rdb.Del(t.Context(), lua.StockKey(f.sku), lua.HoldsKey(f.sku)) })
	if _, err := f.inv.Set(t.Context(), shop.Product{SKU: f.sku, OnHand: 10, SaleTerms: shop.SaleTerms{PriceCents: 100, Currency: "usd", MaxPerOrder: 5}}); err != nil {
		t.Fatal(err)
	}
	return f
}

// openCheckout records an open checkout of one unit and holds it in Redis.
func (f *changeFixture) openCheckout() string {
	id := testenv.RandomID("c-")
	rec := shop.CheckoutRecord{CheckoutID: id, CustomerID: "u-1", Currency: "usd", AmountCents: 100,
		Items: []shop.Item{{SKU: f.sku, Quantity: 1, UnitPriceCents: 100}}}
	if _, err := f.inv.Store.InsertCheckout(f.t.Context(), rec, nil); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.inv.Stock.Reserve(f.t.Context(), f.sku, id, 1); err != nil {
		f.t.Fatal(err)
	}
	return id
}

// resyncThen runs ResyncStock, then end, then checks that nothing is held and the SKU adds up.
func (f *changeFixture) resyncThen(end func()) {
	f.t.Helper()
	if _, err := f.inv.Store.ResyncStock(f.t.Context(), f.inv.Stock, f.sku); err != nil {
		f.t.Fatal(err)
	}
	end()
	v, err := f.inv.Get(f.t.Context(), f.sku)
	if err != nil {
		f.t.Fatal(err)
	}
	if v.Available+v.Held != v.OnHand || v.Held != 0 {
		f.t.Errorf("after the change's end: %+v; want available + held == on_hand and nothing held", v)
	}
}

func TestResyncBetweenAnAppliedDecreaseAndItsCommitKeepsTheUnits(t *testing.T) {
	f := newChangeFixture(t)
	open := f.openCheckout() // an open hold beside the change
	ch := store.StockChange{ID: store.NewChangeID(-3), SKU: f.sku, Delta: -3, Reason: "test decrease"}
	if err := f.inv.stage(t.Context(), ch, 5); err != nil {
		t.Fatal(err)
	}
	if applied, err := f.inv.Store.ApplyChange(t.Context(), ch); err != nil || !applied {
		t.Fatalf("apply: %v %v", applied, err)
	}
	f.resyncThen(func() {
		f.inv.finish(t.Context(), ch, true)
		if _, err := f.inv.Stock.Release(t.Context(), f.sku, open); err != nil {
			t.Fatal(err)
		}
	})
}

func TestResyncBeforeAnIncreaseIsAppliedKeepsTheUnits(t *testing.T) {
	for _, applied := range []bool{true, false} {
		f := newChangeFixture(t)
		ch := store.StockChange{ID: store.NewChangeID(4), SKU: f.sku, Delta: 4, Reason: "test increase"}
		if err := f.inv.stage(t.Context(), ch, 5); err != nil {
			t.Fatal(err)
		}
		f.resyncThen(func() {
			if applied {
				if ok, err := f.inv.Store.ApplyChange(t.Context(), ch); err != nil || !ok {
					t.Fatalf("apply: %v %v", ok, err)
				}
			}
			f.inv.finish(t.Context(), ch, applied)
		})
	}
}
