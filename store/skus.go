package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// Products returns the catalog rows of the given SKUs; SKUs that do not exist are absent
// from the map.
func (s *Store) Products(ctx context.Context, skus []string) (map[string]shop.Product, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT sku, on_hand, sold, price_cents, currency, max_per_order, max_per_customer, sale_starts_at, version FROM skus WHERE sku = ANY($1)`, skus)
	if err != nil {
		return nil, fmt.Errorf("read products: %w", err)
	}
	products, err := pgx.CollectRows(rows, pgx.RowToStructByPos[shop.Product])
	if err != nil {
		return nil, fmt.Errorf("read products: %w", err)
	}
	out := make(map[string]shop.Product, len(products))
	for _, p := range products {
		out[p.SKU] = p
	}
	return out, nil
}

// Product reads one SKU's row; false when the catalog has no such SKU.
func (s *Store) Product(ctx context.Context, sku string) (shop.Product, bool, error) {
	products, err := s.Products(ctx, []string{sku})
	if err != nil {
		return shop.Product{}, false, err
	}
	p, ok := products[sku]
	return p, ok, nil
}

// CreateProduct creates a SKU with nothing on hand; a SKU that exists is left alone.
func (s *Store) CreateProduct(ctx context.Context, p shop.Product) error {
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO skus (sku, on_hand, price_cents, currency, max_per_order, max_per_customer, sale_starts_at) VALUES ($1, 0, $2, $3, $4, $5, $6)
		ON CONFLICT (sku) DO NOTHING`, p.SKU, p.PriceCents, p.Currency, p.MaxPerOrder, p.MaxPerCustomer, p.SaleStartsAt); err != nil {
		return fmt.Errorf("create sku %s: %w", p.SKU, err)
	}
	return nil
}

// SKUs lists every SKU of the catalog, in order.
func (s *Store) SKUs(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT sku FROM skus ORDER BY sku`)
	if err != nil {
		return nil, fmt.Errorf("list skus: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// reconcileTimeout bounds the Redis call made under the SKU's row lock, so a slow Redis
// holds up that SKU's confirmations for at most this long.
const reconcileTimeout = 2 * time.Second

// ResyncStock brings a SKU's Redis copy back in line with Postgres, under the SKU's row
// lock, so no order confirmation or operator change moves on_hand between the read and the
// repair. It rebuilds a SKU Redis lost (lua.Stock.Rebuild) and otherwise reconciles it
// (lua.Stock.Reconcile): every open checkout is counted as holding, lost holds are
// restored, holds whose end Postgres already recorded are ended, available = on_hand - held.
// It records the gen it wrote, so a later Redis showing a lower one is known to have gone
// back in time, and notes a change in the ledger. It returns the note, or "" when nothing
// changed (or Postgres does not know the SKU either).
func (s *Store) ResyncStock(ctx context.Context, stock *lua.Stock, sku string) (string, error) {
	var note string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		note, err = resyncLocked(ctx, tx, stock, sku)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("reconcile %s: %w", sku, err)
	}
	return note, nil
}

// resyncLocked is ResyncStock's transaction: it locks the SKU's row, repairs Redis from it
// and records the gen, and the note in the ledger.
func resyncLocked(ctx context.Context, tx pgx.Tx, stock *lua.Stock, sku string) (string, error) {
	var onHand, maxPerOrder, gen int64
	err := tx.QueryRow(ctx, `SELECT on_hand, max_per_order, redis_gen FROM skus WHERE sku = $1 FOR UPDATE`, sku).Scan(&onHand, &maxPerOrder, &gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil // never stocked: a reserve's "not stocked" stands
	}
	if err != nil {
		return "", fmt.Errorf("lock sku: %w", err)
	}
	open, err := openHolds(ctx, tx, sku)
	if err != nil {
		return "", err
	}
	rctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	live, err := stock.Holds(rctx, sku)
	if err != nil {
		return "", err
	}
	settled, err := settledHolds(ctx, tx, sku, live)
	if err != nil {
		return "", err
	}
	r, err := stock.Reconcile(rctx, sku, onHand, open, settled, gen)
	if err != nil {
		return "", err
	}
	if !r.Stocked {
		level, rebuilt, err := stock.Rebuild(rctx, sku, onHand, maxPerOrder, open, settled, gen)
		if err != nil || !rebuilt {
			return "", err
		}
		// Not a ledger note: a SKU's first load takes this path too.
		note := fmt.Sprintf("reconcile: %s rebuilt from postgres after redis lost it", sku)
		_, err = tx.Exec(ctx, `UPDATE skus SET redis_gen = $2 WHERE sku = $1`, sku, level.Gen)
		return note, err
	}
	note := reconcileNote(sku, onHand, r)
	if _, err := tx.Exec(ctx, `UPDATE skus SET redis_gen = $2 WHERE sku = $1`, sku, r.Gen); err != nil {
		return "", fmt.Errorf("record redis gen: %w", err)
	}
	if note == "" {
		return "", nil
	}
	_, err = tx.Exec(ctx, `INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason) VALUES ($1, 0, 0, $2)`, sku, note)
	return note, err
}

// reconcileNote says what a reconcile of sku changed in Redis, or "" when it changed nothing.
func reconcileNote(sku string, onHand int64, r lua.Reconciled) string {
	if r.Before == r.After && r.Restored == 0 && !r.RolledBack {
		return ""
	}
	note := fmt.Sprintf("reconcile: redis available of %s %d -> %d (on_hand %d), %d lost holds of open checkouts restored", sku, r.Before, r.After, onHand, r.Restored)
	if r.RolledBack {
		note += "; redis had gone back in time"
	} else if r.OtherNode {
		note += "; redis had restarted or failed over"
	}
	return note
}

// openHolds lists the open checkouts' quantities of a SKU: every hold that can exist.
func openHolds(ctx context.Context, tx pgx.Tx, sku string) ([]lua.Hold, error) {
	rows, err := tx.Query(ctx, `
		SELECT ci.checkout_id, ci.quantity FROM checkout_items ci JOIN checkouts c USING (checkout_id)
		WHERE ci.sku = $1 AND c.ended_at IS NULL`, sku)
	if err != nil {
		return nil, fmt.Errorf("read open checkouts of %s: %w", sku, err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[lua.Hold])
}

// settledHolds lists the SKU's live holds in Redis whose end Postgres already recorded: the
// checkouts whose order is confirmed (the units left on_hand; the commit is still to come),
// the operator changes written to on_hand, and the checkouts that ended without a sale
// (their release is lost or still to come; lua.UnsoldHoldID). Read under the SKU's row lock, the list
// cannot grow before the repair runs: a confirmation or change that writes on_hand waits for
// the lock, and a hold taken meanwhile belongs to an open checkout or an unwritten change.
func settledHolds(ctx context.Context, tx pgx.Tx, sku string, live []lua.Hold) ([]string, error) {
	if len(live) == 0 {
		return nil, nil
	}
	var checkouts, changes []string
	for _, h := range live {
		if id, ok := lua.IsChangeHold(h.CheckoutID); ok {
			changes = append(changes, id)
		} else {
			checkouts = append(checkouts, h.CheckoutID)
		}
	}
	rows, err := tx.Query(ctx, `
		SELECT checkout_id FROM checkouts WHERE checkout_id = ANY($1) AND status = 'confirmed'
		UNION ALL
		SELECT '~' || change_id FROM stock_changes WHERE change_id = ANY($2)
		UNION ALL
		SELECT '!' || checkout_id FROM checkouts
		WHERE checkout_id = ANY($1) AND ended_at IS NOT NULL AND status <> 'confirmed'`, checkouts, changes) // lua.UnsoldHoldID
	if err != nil {
		return nil, fmt.Errorf("read settled holds of %s: %w", sku, err)
	}
	settled, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read settled holds of %s: %w", sku, err)
	}
	return settled, nil
}
