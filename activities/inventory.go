package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/checkout-saga/checkout-saga/lua"
)

// Inventory is the operators' view of stock: it sets stock and price in Postgres and
// publishes availability to Redis. It is used by the API's admin endpoints and the local
// stack's demo data, never by the saga.
type Inventory struct {
	Store *Store
	Stock *lua.Stock
}

// InventoryView is one SKU as operators see it: Postgres's on_hand and sold beside Redis's
// available and held.
type InventoryView struct {
	SKU         string `json:"sku"`
	OnHand      int64  `json:"on_hand"`
	Available   int64  `json:"available"`
	Held        int64  `json:"held"`
	Sold        int64  `json:"sold"`
	PriceCents  int64  `json:"price_cents"`
	Currency    string `json:"currency"`
	MaxPerOrder int64  `json:"max_per_order"`
}

// ErrOnHandBelowHeld means an operator tried to set on_hand lower than the units currently
// held by open checkouts.
var ErrOnHandBelowHeld = lua.ErrOnHandBelowHeld

// Set writes a SKU's stock and price. The Postgres transaction stays open until Redis has
// taken the new availability, so the two never disagree because one of them failed: if
// Redis refuses (on_hand below what is held) or is down, Postgres is rolled back.
func (inv *Inventory) Set(ctx context.Context, p Product) (InventoryView, error) {
	var view InventoryView
	err := pgx.BeginFunc(ctx, inv.Store.pool, func(tx pgx.Tx) error {
		written, err := setProduct(ctx, tx, p)
		if err != nil {
			return err
		}
		level, err := inv.Stock.SetStock(ctx, p.SKU, p.OnHand, p.MaxPerOrder)
		if err != nil {
			return fmt.Errorf("publish availability of %s: %w", p.SKU, err)
		}
		view = viewOf(written, level)
		return nil
	})
	if err != nil {
		return InventoryView{}, fmt.Errorf("set stock of %s: %w", p.SKU, err)
	}
	return view, nil
}

// Get reads a SKU from Postgres and Redis.
func (inv *Inventory) Get(ctx context.Context, sku string) (InventoryView, error) {
	products, err := inv.Store.Products(ctx, []string{sku})
	if err != nil {
		return InventoryView{}, err
	}
	p, ok := products[sku]
	if !ok {
		return InventoryView{}, fmt.Errorf("read sku %s: %w", sku, ErrNotFound)
	}
	level, err := inv.Stock.Level(ctx, sku)
	if err != nil {
		return InventoryView{}, fmt.Errorf("read availability of %s: %w", sku, err)
	}
	return viewOf(p, level), nil
}

func viewOf(p Product, level lua.Level) InventoryView {
	return InventoryView{
		SKU: p.SKU, OnHand: p.OnHand, Available: level.Available, Held: level.Held, Sold: p.Sold,
		PriceCents: p.PriceCents, Currency: p.Currency, MaxPerOrder: p.MaxPerOrder,
	}
}

// IsNotFound reports whether err means the row does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
