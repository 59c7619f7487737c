package lua

import (
	"testing"

	"github.com/checkout-saga/checkout-saga/shop"
)

func TestPrecheckRefusesShortCartsAndLetsRetriesThrough(t *testing.T) {
	s, rdb, sku := stocked(t, 3, 3)
	ctx := t.Context()
	other := testSKU(t, rdb)

	p, err := s.Precheck(ctx, "c-new", map[string]int64{sku: 3})
	if err != nil || p.SoldOut() || !p.Known || p.Seen || len(p.Shortages) != 0 {
		t.Fatalf("3 of 3 available: %+v, %v; want no shortage", p, err)
	}
	if _, err := s.Reserve(ctx, sku, "c-holder", 2); err != nil {
		t.Fatal(err)
	}
	p, err = s.Precheck(ctx, "c-new", map[string]int64{sku: 2})
	if err != nil || !p.SoldOut() || len(p.Shortages) != 1 || p.Shortages[0] != (shop.Shortage{SKU: sku, Requested: 2, Available: 1}) {
		t.Errorf("2 wanted, 1 available: %+v, %v; want sold out with one shortage", p, err)
	}
	// The holder's retry must reach its saga whatever the stock says.
	p, _ = s.Precheck(ctx, "c-holder", map[string]int64{sku: 2})
	if !p.Seen || p.SoldOut() {
		t.Errorf("holder's retry: %+v; want seen, not sold out", p)
	}
	// So must a checkout whose hold already ended (a retry after it was confirmed).
	if _, err := s.Release(ctx, sku, "c-holder"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, sku, "c-done", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, sku, "c-done"); err != nil {
		t.Fatal(err)
	}
	if p, _ = s.Precheck(ctx, "c-done", map[string]int64{sku: 3}); !p.Seen || p.SoldOut() {
		t.Errorf("ended checkout's retry: %+v; want seen", p)
	}
	// A SKU Redis does not know: the gate has no opinion.
	if p, _ = s.Precheck(ctx, "c-new", map[string]int64{sku: 1, other: 1}); p.Known || p.SoldOut() {
		t.Errorf("unknown sku: %+v; want not known, not sold out", p)
	}
}
