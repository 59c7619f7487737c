package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// Set writes Postgres (row and ledger) and publishes to Redis; a Set below the units held is
// refused by Redis and changes nothing in Postgres.
func TestSetPublishesAndChangesNothingWhenRedisRefuses(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	rdb := testenv.Redis(t)
	stockRedis := lua.New(rdb)
	inv := &inventory.Inventory{Store: store.New(pool), Stock: stockRedis}
	sku := testenv.RandomID("INV-")
	holder := testenv.RandomID("c-")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rdb.Del(ctx, lua.StockKey(sku), lua.HoldsKey(sku), lua.HoldEndsKey(sku)).Err()
	})

	view, err := inv.Set(t.Context(), shop.Product{SKU: sku, OnHand: 10, SaleTerms: shop.SaleTerms{PriceCents: 500, Currency: "usd", MaxPerOrder: 3}})
	if err != nil {
		t.Fatalf("set new sku: %v", err)
	}
	want := shop.InventoryView{SKU: sku, OnHand: 10, Available: 10, Held: 0, Sold: 0, SaleTerms: shop.SaleTerms{PriceCents: 500, Currency: "usd", MaxPerOrder: 3}, ETag: view.ETag}
	if view != want || view.ETag == "" {
		t.Errorf("set new sku = %+v, want %+v", view, want)
	}
	got, err := inv.Get(t.Context(), sku)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got != want {
		t.Errorf("get after set = %+v, want %+v", got, want)
	}
	if s := testenv.ReadSKU(t, pool, sku); s.LedgerRows != 1 || s.LedgerOnHand != 10 {
		t.Errorf("ledger after first set: %+v, want one row of +10", s)
	}

	if _, err := inv.Set(t.Context(), shop.Product{SKU: sku, OnHand: 15, SaleTerms: shop.SaleTerms{PriceCents: 500, Currency: "usd", MaxPerOrder: 3}}); err != nil {
		t.Fatalf("raise on_hand: %v", err)
	}
	var lastDelta int64
	if err := pool.QueryRow(t.Context(), `SELECT delta_on_hand FROM inventory_ledger WHERE sku = $1 ORDER BY id DESC LIMIT 1`, sku).
		Scan(&lastDelta); err != nil {
		t.Fatalf("read last ledger row: %v", err)
	}
	if s := testenv.ReadSKU(t, pool, sku); lastDelta != 5 || s.LedgerRows != 2 || s.LedgerOnHand != 15 || s.OnHand != 15 {
		t.Errorf("after raising on_hand to 15: last ledger delta %d, sku %+v; want +5, two rows summing to 15", lastDelta, s)
	}

	if _, err := stockRedis.Reserve(t.Context(), sku, holder, 3); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	got, err = inv.Get(t.Context(), sku)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.OnHand != 15 || got.Held != 3 || got.Available != 12 || got.Available+got.Held != got.OnHand {
		t.Errorf("get with 3 held = %+v, want on_hand 15 == available 12 + held 3", got)
	}

	// Below what is held: Redis refuses, so Postgres (stock, price and ledger) is not changed.
	before := testenv.ReadSKU(t, pool, sku)
	_, err = inv.Set(t.Context(), shop.Product{SKU: sku, OnHand: 2, SaleTerms: shop.SaleTerms{PriceCents: 1, Currency: "usd", MaxPerOrder: 3}})
	if !errors.Is(err, shop.ErrOnHandBelowHeld) {
		t.Fatalf("set on_hand 2 with 3 held: err = %v, want shop.ErrOnHandBelowHeld", err)
	}
	if s := testenv.ReadSKU(t, pool, sku); s != before {
		t.Errorf("postgres after refused set: %+v, want unchanged %+v", s, before)
	}
	got, err = inv.Get(t.Context(), sku)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.PriceCents != 500 || got.OnHand != 15 || got.Available != 12 || got.Held != 3 {
		t.Errorf("after refused set: %+v, want price 500, on_hand 15, available 12, held 3", got)
	}
}

// An unknown SKU reads as shop.ErrNotFound.
func TestGetOfAnUnknownSKUIsNotFound(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	inv := &inventory.Inventory{Store: store.New(pool), Stock: lua.New(testenv.Redis(t))}
	if _, err := inv.Get(t.Context(), testenv.RandomID("NOPE-")); !errors.Is(err, shop.ErrNotFound) {
		t.Errorf("inventory get of an unknown sku: err = %v, want shop.ErrNotFound", err)
	}
}

// A SKU an operator sets through this process reaches the API's catalog check at once, even
// with the catalog answering from memory for a long TTL: SetIfMatch (the PUT's path) and Set
// both tell the cache.
func TestSetReachesTheCachedCatalogAtOnce(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	rdb := testenv.Redis(t)
	st := store.New(pool)
	cache := store.NewCatalogCache(st, time.Hour, 0)
	inv := &inventory.Inventory{Store: st, Stock: lua.New(rdb), Catalog: cache}
	sku := testenv.RandomID("INV-")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rdb.Del(ctx, lua.StockKey(sku), lua.HoldsKey(sku), lua.HoldEndsKey(sku)).Err()
	})
	if got, _ := cache.Products(t.Context(), []string{sku}); len(got) != 0 {
		t.Fatalf("catalog %+v before the SKU exists", got)
	}
	view, err := inv.Set(t.Context(), shop.Product{SKU: sku, OnHand: 10, SaleTerms: shop.SaleTerms{PriceCents: 500, Currency: "usd", MaxPerOrder: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := cache.Products(t.Context(), []string{sku}); got[sku].MaxPerOrder != 3 {
		t.Fatalf("catalog %+v after the SKU was created, want it with max_per_order 3", got)
	}
	if _, err := inv.SetIfMatch(t.Context(), shop.Product{SKU: sku, OnHand: 10, SaleTerms: shop.SaleTerms{PriceCents: 500, Currency: "usd", MaxPerOrder: 1}}, view.ETag); err != nil {
		t.Fatal(err)
	}
	if got, _ := cache.Products(t.Context(), []string{sku}); got[sku].MaxPerOrder != 1 {
		t.Fatalf("catalog %+v after max_per_order went to 1 with If-Match, want 1 at once", got)
	}
}
