// Package inventory is the operators' stock service: set and adjust a SKU's stock and price
// in Postgres (package store) and publish availability to Redis (package lua), as the three
// steps of store/stock_changes.go. The API's admin endpoints and the local stack's demo data
// use it; the saga never does. It may import shop, store and lua.
package inventory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// Inventory is the operators' view of stock: it changes stock and price in Postgres and
// publishes availability to Redis. It is used by the API's admin endpoints and the local
// stack's demo data, never by the saga. Every change runs as the three steps described in
// store/stock_changes.go.
type Inventory struct {
	Store *store.Store
	Stock *lua.Stock
	// Logger gets the Redis steps that failed after Postgres took a change (the reconciler
	// finishes them); nil logs to slog.Default.
	Logger *slog.Logger
	// Catalog, when set, is told of every SKU set here (price, max_per_order, a new SKU), so
	// the API's catalog check in this process reads it again at once (store.CatalogCache).
	Catalog interface{ Forget(sku string) }
}

// maxSetAttempts bounds how often a PUT without If-Match starts again because a sale changed
// the row between its read and its write; each attempt takes a few milliseconds, and a
// SKU confirms at most a few dozen orders a second.
const maxSetAttempts = 20

// Set writes a SKU's stock and price: "set on_hand to p.OnHand", creating the SKU if needed.
func (inv *Inventory) Set(ctx context.Context, p shop.Product) (shop.InventoryView, error) {
	return inv.SetIfMatch(ctx, p, "")
}

// SetIfMatch is Set as a compare-and-set when ifMatch is not empty: the write happens only if
// the SKU's ETag is still ifMatch, else shop.ErrVersionMismatch and nothing changes. Without
// ifMatch, a sale between the read and the write makes it read again (so on_hand ends at
// p.OnHand, never at p.OnHand plus the units sold meanwhile).
func (inv *Inventory) SetIfMatch(ctx context.Context, p shop.Product, ifMatch string) (shop.InventoryView, error) {
	if inv.Catalog != nil {
		defer inv.Catalog.Forget(p.SKU)
	}
	for range maxSetAttempts {
		cur, exists, err := inv.Store.Product(ctx, p.SKU)
		if err != nil {
			return shop.InventoryView{}, fmt.Errorf("set stock of %s: %w", p.SKU, err)
		}
		if ifMatch != "" && (!exists || shop.ETag(cur.Version) != ifMatch) {
			return shop.InventoryView{}, fmt.Errorf("set stock of %s: %w", p.SKU, shop.ErrVersionMismatch)
		}
		if !exists {
			// Create the row at 0 first, so the change below is an ordinary one and the
			// ledger shows the first stock as a change like any other.
			if err := inv.Store.CreateProduct(ctx, p); err != nil {
				return shop.InventoryView{}, fmt.Errorf("set stock of %s: %w", p.SKU, err)
			}
			continue
		}
		ch := store.StockChange{SKU: p.SKU, Delta: p.OnHand - cur.OnHand, Reason: "stock set by operator", Set: &p, Version: cur.Version}
		ch.ID = store.NewChangeID(ch.Delta)
		applied, err := inv.change(ctx, ch, p.MaxPerOrder)
		switch {
		case errors.Is(err, shop.ErrInsufficientStock):
			return shop.InventoryView{}, fmt.Errorf("set stock of %s to %d: %w", p.SKU, p.OnHand, shop.ErrOnHandBelowHeld)
		case err != nil:
			return shop.InventoryView{}, fmt.Errorf("set stock of %s: %w", p.SKU, err)
		case applied:
			return inv.Get(ctx, p.SKU)
		case ifMatch != "":
			return shop.InventoryView{}, fmt.Errorf("set stock of %s: %w", p.SKU, shop.ErrVersionMismatch)
		}
	}
	return shop.InventoryView{}, fmt.Errorf("set stock of %s: the sku kept changing under %d attempts; try again", p.SKU, maxSetAttempts)
}

// Adjust adds a.Delta (which may be negative) to the SKU's on_hand in one step, with
// a.Reason in the ledger. A negative delta beyond the units not held is
// shop.ErrInsufficientStock; an unknown SKU is shop.ErrNotFound; a key used with another adjustment
// is shop.ErrIdempotencyKeyReused. Nothing changes in any of those cases.
func (inv *Inventory) Adjust(ctx context.Context, a shop.Adjustment) (shop.InventoryView, error) {
	hash := requestHash(a)
	if a.IdempotencyKey != "" {
		if view, done, err := inv.replay(ctx, a, hash); done || err != nil {
			return view, err
		}
	}
	cur, exists, err := inv.Store.Product(ctx, a.SKU)
	if err != nil {
		return shop.InventoryView{}, fmt.Errorf("adjust %s: %w", a.SKU, err)
	}
	if !exists {
		return shop.InventoryView{}, fmt.Errorf("adjust %s: %w", a.SKU, shop.ErrNotFound)
	}
	ch := store.StockChange{ID: store.NewChangeID(a.Delta), SKU: a.SKU, Delta: a.Delta, Reason: a.Reason,
		IdempotencyKey: a.IdempotencyKey, RequestHash: hash}
	_, err = inv.change(ctx, ch, cur.MaxPerOrder)
	switch {
	case errors.Is(err, store.ErrKeyTaken):
		// The same key raced us and won: answer as its retry.
		view, _, err := inv.replay(ctx, a, hash)
		return view, err
	case err != nil:
		return shop.InventoryView{}, fmt.Errorf("adjust %s by %+d: %w", a.SKU, a.Delta, err)
	}
	view, err := inv.Get(ctx, a.SKU)
	if err != nil {
		return shop.InventoryView{}, err
	}
	if a.IdempotencyKey != "" {
		// Best effort: a retry before this lands answers the current view instead.
		if body, err := json.Marshal(storedView{view, view.ETag}); err == nil {
			_ = inv.Store.StoreChangeResponse(ctx, ch.ID, body)
		}
	}
	return view, nil
}

// storedView is an adjustment's answer as kept for its retries.
type storedView struct {
	shop.InventoryView
	ETag string `json:"etag"`
}

// replay answers an adjustment whose idempotency key Postgres already knows.
func (inv *Inventory) replay(ctx context.Context, a shop.Adjustment, hash string) (shop.InventoryView, bool, error) {
	k, err := inv.Store.ChangeByKey(ctx, a.IdempotencyKey)
	if err != nil || !k.Found {
		return shop.InventoryView{}, false, err
	}
	if k.RequestHash != hash {
		return shop.InventoryView{}, true, fmt.Errorf("adjust %s: %w", a.SKU, shop.ErrIdempotencyKeyReused)
	}
	var sv storedView
	if k.Response != nil && json.Unmarshal(k.Response, &sv) == nil {
		sv.InventoryView.ETag = sv.ETag
		return sv.InventoryView, true, nil
	}
	view, err := inv.Get(ctx, a.SKU)
	return view, true, err
}

// requestHash identifies an adjustment's body, for its idempotency key.
func requestHash(a shop.Adjustment) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s", a.SKU, a.Delta, a.Reason)))
	return hex.EncodeToString(sum[:])
}

// change runs a change's three steps (store/stock_changes.go). It reports false when Postgres did
// not take it (a PUT's row moved on); the stage is undone then.
func (inv *Inventory) change(ctx context.Context, ch store.StockChange, maxPerOrder int64) (bool, error) {
	if err := inv.stage(ctx, ch, maxPerOrder); err != nil {
		// Redis's refusal (*lua.InsufficientStockError) unwraps to shop.ErrInsufficientStock.
		return false, err
	}
	applied, err := inv.Store.ApplyChange(ctx, ch)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23514" {
		// on_hand would go below 0: Redis thought more units were free than Postgres has.
		err = fmt.Errorf("%w: %w", shop.ErrInsufficientStock, err)
	}
	if err != nil || !applied {
		inv.finish(ctx, ch, false)
		return false, err
	}
	inv.finish(ctx, ch, true)
	return true, nil
}

// stage is step 1. A SKU Redis lost is rebuilt from Postgres first, with every open
// checkout's hold (a plain set would make their units sellable again); a Redis that went
// back in time is reconciled first.
func (inv *Inventory) stage(ctx context.Context, ch store.StockChange, maxPerOrder int64) error {
	for attempt := 0; ; attempt++ {
		_, err := inv.Stock.StageChange(ctx, ch.SKU, ch.ID, ch.Delta, maxPerOrder)
		if attempt > 0 || !errors.Is(err, lua.ErrNotStocked) && !errors.Is(err, lua.ErrRolledBack) {
			return err
		}
		if _, err := inv.Store.ResyncStock(ctx, inv.Stock, ch.SKU); err != nil {
			return err
		}
	}
}

// finish is step 3: finish the staged change (applied) or undo it. A failure is only
// logged: Postgres already decided, and the reconciler finishes or undoes the change's hold
// from stock_changes. Meanwhile the SKU can only undersell.
func (inv *Inventory) finish(ctx context.Context, ch store.StockChange, applied bool) {
	if ch.Delta == 0 {
		return
	}
	holder := lua.ChangeHoldID(ch.ID)
	var err error
	switch {
	case ch.Delta < 0 && applied: // the units left on_hand: they are gone
		_, err = inv.Stock.Commit(ctx, ch.SKU, holder)
	case ch.Delta > 0 && !applied: // the units never arrived
		_, err = inv.Stock.Forfeit(ctx, ch.SKU, holder)
	default: // units that are really there become available
		_, err = inv.Stock.Release(ctx, ch.SKU, holder)
	}
	if err != nil {
		logger := inv.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Warn("stock change left for the reconciler: its redis step failed", "sku", ch.SKU, "change_id", ch.ID, "applied", applied, "error", err)
	}
}

// Get reads a SKU from Postgres and Redis.
func (inv *Inventory) Get(ctx context.Context, sku string) (shop.InventoryView, error) {
	p, exists, err := inv.Store.Product(ctx, sku)
	if err != nil {
		return shop.InventoryView{}, err
	}
	if !exists {
		return shop.InventoryView{}, fmt.Errorf("read sku %s: %w", sku, shop.ErrNotFound)
	}
	level, err := inv.Stock.Level(ctx, sku)
	if err != nil {
		return shop.InventoryView{}, fmt.Errorf("read availability of %s: %w", sku, err)
	}
	return viewOf(p, level), nil
}

func viewOf(p shop.Product, level lua.Level) shop.InventoryView {
	return shop.InventoryView{
		SKU: p.SKU, OnHand: p.OnHand, Available: level.Available, Held: level.Held, Sold: p.Sold,
		SaleTerms: p.SaleTerms, ETag: shop.ETag(p.Version),
	}
}
