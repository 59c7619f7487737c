package activities

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
)

// Inventory is the operators' view of stock: it changes stock and price in Postgres and
// publishes availability to Redis. It is used by the API's admin endpoints and the local
// stack's demo data, never by the saga. Every change runs as the three steps described in
// stockchange.go.
type Inventory struct {
	Store *Store
	Stock *lua.Stock
	// Logger gets the Redis steps that failed after Postgres took a change (the reconciler
	// finishes them); nil logs to slog.Default.
	Logger *slog.Logger
}

// maxSetAttempts bounds how often a PUT without If-Match starts again because a sale changed
// the row between its read and its write; each attempt takes a few milliseconds, and a
// SKU confirms at most a few dozen orders a second.
const maxSetAttempts = 20

// Set writes a SKU's stock and price: "set on_hand to p.OnHand", creating the SKU if needed.
func (inv *Inventory) Set(ctx context.Context, p Product) (InventoryView, error) {
	return inv.SetIfMatch(ctx, p, "")
}

// SetIfMatch is Set as a compare-and-set when ifMatch is not empty: the write happens only if
// the SKU's ETag is still ifMatch, else ErrVersionMismatch and nothing changes. Without
// ifMatch, a sale between the read and the write makes it read again (so on_hand ends at
// p.OnHand, never at p.OnHand plus the units sold meanwhile).
func (inv *Inventory) SetIfMatch(ctx context.Context, p Product, ifMatch string) (InventoryView, error) {
	for range maxSetAttempts {
		cur, exists, err := inv.Store.product(ctx, p.SKU)
		if err != nil {
			return InventoryView{}, fmt.Errorf("set stock of %s: %w", p.SKU, err)
		}
		if ifMatch != "" && (!exists || ETag(cur.Version) != ifMatch) {
			return InventoryView{}, fmt.Errorf("set stock of %s: %w", p.SKU, ErrVersionMismatch)
		}
		if !exists {
			// Create the row at 0 first, so the change below is an ordinary one and the
			// ledger shows the first stock as a change like any other.
			if err := inv.Store.createProduct(ctx, p); err != nil {
				return InventoryView{}, fmt.Errorf("set stock of %s: %w", p.SKU, err)
			}
			continue
		}
		ch := stockChange{sku: p.SKU, delta: p.OnHand - cur.OnHand, reason: "stock set by operator", set: &p, version: cur.Version}
		ch.id = newChangeID(ch.delta)
		applied, err := inv.change(ctx, ch, p.MaxPerOrder)
		switch {
		case errors.Is(err, ErrInsufficientStock):
			return InventoryView{}, fmt.Errorf("set stock of %s to %d: %w", p.SKU, p.OnHand, ErrOnHandBelowHeld)
		case err != nil:
			return InventoryView{}, fmt.Errorf("set stock of %s: %w", p.SKU, err)
		case applied:
			return inv.Get(ctx, p.SKU)
		case ifMatch != "":
			return InventoryView{}, fmt.Errorf("set stock of %s: %w", p.SKU, ErrVersionMismatch)
		}
	}
	return InventoryView{}, fmt.Errorf("set stock of %s: the sku kept changing under %d attempts; try again", p.SKU, maxSetAttempts)
}

// Adjust adds a.Delta (which may be negative) to the SKU's on_hand in one step, with
// a.Reason in the ledger. A negative delta beyond the units not held is
// ErrInsufficientStock; an unknown SKU is ErrNotFound; a key used with another adjustment
// is ErrIdempotencyKeyReused. Nothing changes in any of those cases.
func (inv *Inventory) Adjust(ctx context.Context, a Adjustment) (InventoryView, error) {
	hash := requestHash(a)
	if a.IdempotencyKey != "" {
		if view, done, err := inv.replay(ctx, a, hash); done || err != nil {
			return view, err
		}
	}
	cur, exists, err := inv.Store.product(ctx, a.SKU)
	if err != nil {
		return InventoryView{}, fmt.Errorf("adjust %s: %w", a.SKU, err)
	}
	if !exists {
		return InventoryView{}, fmt.Errorf("adjust %s: %w", a.SKU, ErrNotFound)
	}
	ch := stockChange{id: newChangeID(a.Delta), sku: a.SKU, delta: a.Delta, reason: a.Reason,
		idempotencyKey: a.IdempotencyKey, requestHash: hash}
	_, err = inv.change(ctx, ch, cur.MaxPerOrder)
	switch {
	case errors.Is(err, errKeyTaken):
		// The same key raced us and won: answer as its retry.
		view, _, err := inv.replay(ctx, a, hash)
		return view, err
	case err != nil:
		return InventoryView{}, fmt.Errorf("adjust %s by %+d: %w", a.SKU, a.Delta, err)
	}
	view, err := inv.Get(ctx, a.SKU)
	if err != nil {
		return InventoryView{}, err
	}
	if a.IdempotencyKey != "" {
		// Best effort: a retry before this lands answers the current view instead.
		if body, err := json.Marshal(storedView{view, view.ETag}); err == nil {
			_ = inv.Store.storeChangeResponse(ctx, ch.id, body)
		}
	}
	return view, nil
}

// storedView is an adjustment's answer as kept for its retries.
type storedView struct {
	InventoryView
	ETag string `json:"etag"`
}

// replay answers an adjustment whose idempotency key Postgres already knows.
func (inv *Inventory) replay(ctx context.Context, a Adjustment, hash string) (InventoryView, bool, error) {
	k, err := inv.Store.changeByKey(ctx, a.IdempotencyKey)
	if err != nil || !k.found {
		return InventoryView{}, false, err
	}
	if k.requestHash != hash {
		return InventoryView{}, true, fmt.Errorf("adjust %s: %w", a.SKU, ErrIdempotencyKeyReused)
	}
	var sv storedView
	if k.response != nil && json.Unmarshal(k.response, &sv) == nil {
		sv.InventoryView.ETag = sv.ETag
		return sv.InventoryView, true, nil
	}
	view, err := inv.Get(ctx, a.SKU)
	return view, true, err
}

// requestHash identifies an adjustment's body, for its idempotency key.
func requestHash(a Adjustment) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s", a.SKU, a.Delta, a.Reason)))
	return hex.EncodeToString(sum[:])
}

// change runs a change's three steps (stockchange.go). It reports false when Postgres did
// not take it (a PUT's row moved on); the stage is undone then.
func (inv *Inventory) change(ctx context.Context, ch stockChange, maxPerOrder int64) (bool, error) {
	if err := inv.stage(ctx, ch, maxPerOrder); err != nil {
		if errors.Is(err, lua.ErrInsufficientStock) {
			// Redis refused the stage: say it in the vocabulary the API maps.
			err = fmt.Errorf("%w: %w", ErrInsufficientStock, err)
		}
		return false, err
	}
	applied, err := inv.Store.applyChange(ctx, ch)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23514" {
		// on_hand would go below 0: Redis thought more units were free than Postgres has.
		err = fmt.Errorf("%w: %w", ErrInsufficientStock, err)
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
func (inv *Inventory) stage(ctx context.Context, ch stockChange, maxPerOrder int64) error {
	for attempt := 0; ; attempt++ {
		_, err := inv.Stock.StageChange(ctx, ch.sku, ch.id, ch.delta, maxPerOrder)
		if attempt > 0 || !errors.Is(err, lua.ErrNotStocked) && !errors.Is(err, lua.ErrRolledBack) {
			return err
		}
		if _, err := inv.Store.ResyncStock(ctx, inv.Stock, ch.sku); err != nil {
			return err
		}
	}
}

// finish is step 3: finish the staged change (applied) or undo it. A failure is only
// logged: Postgres already decided, and the reconciler finishes or undoes the change's hold
// from stock_changes. Meanwhile the SKU can only undersell.
func (inv *Inventory) finish(ctx context.Context, ch stockChange, applied bool) {
	if ch.delta == 0 {
		return
	}
	holder := lua.ChangeHoldID(ch.id)
	var err error
	switch {
	case ch.delta < 0 && applied: // the units left on_hand: they are gone
		_, err = inv.Stock.Commit(ctx, ch.sku, holder)
	case ch.delta > 0 && !applied: // the units never arrived
		_, err = inv.Stock.Forfeit(ctx, ch.sku, holder)
	default: // units that are really there become available
		_, err = inv.Stock.Release(ctx, ch.sku, holder)
	}
	if err != nil {
		logger := inv.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Warn("stock change left for the reconciler: its redis step failed", "sku", ch.sku, "change_id", ch.id, "applied", applied, "error", err)
	}
}

// Get reads a SKU from Postgres and Redis.
func (inv *Inventory) Get(ctx context.Context, sku string) (InventoryView, error) {
	p, exists, err := inv.Store.product(ctx, sku)
	if err != nil {
		return InventoryView{}, err
	}
	if !exists {
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
		PriceCents: p.PriceCents, Currency: p.Currency, MaxPerOrder: p.MaxPerOrder, MaxPerCustomer: p.MaxPerCustomer, ETag: ETag(p.Version),
	}
}

// product reads one SKU's row.
func (s *Store) product(ctx context.Context, sku string) (Product, bool, error) {
	products, err := s.Products(ctx, []string{sku})
	if err != nil {
		return Product{}, false, err
	}
	p, ok := products[sku]
	return p, ok, nil
}

// createProduct creates a SKU with nothing on hand; a SKU that exists is left alone.
func (s *Store) createProduct(ctx context.Context, p Product) error {
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO skus (sku, on_hand, price_cents, currency, max_per_order, max_per_customer) VALUES ($1, 0, $2, $3, $4, $5)
		ON CONFLICT (sku) DO NOTHING`, p.SKU, p.PriceCents, p.Currency, p.MaxPerOrder, p.MaxPerCustomer); err != nil {
		return fmt.Errorf("create sku %s: %w", p.SKU, err)
	}
	return nil
}

// IsNotFound reports whether err means the row does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
