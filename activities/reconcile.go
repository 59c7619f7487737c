package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/activity"

	"github.com/checkout-saga/checkout-saga/lua"
)

// ReconcileStockInput tunes a reconciliation run.
type ReconcileStockInput struct {
	// GraceSeconds: a hold whose checkout ended less than this long ago is left to its saga,
	// which is still releasing or committing it (default 300).
	GraceSeconds int64 `json:"grace_seconds"`
}

// ReconcileStockResult is what a run found and did.
type ReconcileStockResult struct {
	SKUs        int      `json:"skus"`
	Corrections []string `json:"corrections"`
	Unexplained []string `json:"unexplained"`
}

// ReconcileStock compares Redis with Postgres for every SKU and repairs drift in the safe
// direction: a hold whose checkout ended (in Postgres) long ago is committed (confirmed
// checkouts) or released (every other end); an operator's change whose Redis step did not
// finish is finished (or undone, if Postgres never recorded it); then every open checkout is
// counted as holding, lost holds are restored, and available is recomputed as
// on_hand - held (lua/reconcile.lua). A SKU Redis lost is rebuilt. Each correction is
// appended to the inventory ledger. A hold whose checkout Postgres does not know is left
// alone and reported as unexplained, for support.
func (a *Activities) ReconcileStock(ctx context.Context, in ReconcileStockInput) (ReconcileStockResult, error) {
	grace := time.Duration(in.GraceSeconds) * time.Second
	if grace <= 0 {
		grace = 5 * time.Minute
	}
	skus, err := a.Store.allSKUs(ctx)
	if err != nil {
		return ReconcileStockResult{}, err
	}
	res := ReconcileStockResult{SKUs: len(skus)}
	for _, sku := range skus {
		activity.RecordHeartbeat(ctx, sku)
		if err := a.reconcileHolds(ctx, sku, grace, &res); err != nil {
			return res, err
		}
		note, err := a.Store.ResyncStock(ctx, a.Stock, sku)
		if err != nil {
			return res, err
		}
		if _, err := a.Stock.SweepHoldEnds(ctx, sku); err != nil { // Redis 7.0 has no per-field TTL
			return res, err
		}
		if note != "" {
			res.Corrections = append(res.Corrections, note)
		}
	}
	if len(res.Corrections)+len(res.Unexplained) > 0 {
		activity.GetLogger(ctx).Warn("stock reconciled", "corrections", len(res.Corrections), "unexplained", len(res.Unexplained))
	}
	return res, nil
}

// reconcileHolds ends the holds of checkouts that ended in Postgres more than grace ago.
func (a *Activities) reconcileHolds(ctx context.Context, sku string, grace time.Duration, res *ReconcileStockResult) error {
	holds, err := a.Stock.Holds(ctx, sku)
	if err != nil || len(holds) == 0 {
		return err
	}
	var ids []string
	for _, h := range holds {
		if _, isChange := lua.IsChangeHold(h.CheckoutID); !isChange {
			ids = append(ids, h.CheckoutID)
		}
	}
	ends, err := a.Store.checkoutEnds(ctx, ids)
	if err != nil {
		return err
	}
	for _, h := range holds {
		if changeID, isChange := lua.IsChangeHold(h.CheckoutID); isChange {
			note, err := a.Store.finishChange(ctx, a.Stock, sku, changeID, grace)
			if err != nil {
				return err
			}
			if note != "" {
				res.Corrections = append(res.Corrections, note)
			}
			continue
		}
		end, known := ends[h.CheckoutID]
		switch {
		case !known:
			res.Unexplained = append(res.Unexplained, fmt.Sprintf("%s: %d held by %s, a checkout Postgres does not know", sku, h.Quantity, h.CheckoutID))
			continue
		case end.endedAt == nil || time.Since(*end.endedAt) < grace:
			continue // live, or its saga is still cleaning up
		}
		var note string
		if end.status == "confirmed" {
			_, err = a.Stock.Commit(ctx, sku, h.CheckoutID)
			note = fmt.Sprintf("reconcile: committed the leftover hold of %d x %s by confirmed checkout %s", h.Quantity, sku, h.CheckoutID)
		} else {
			_, err = a.Stock.Release(ctx, sku, h.CheckoutID)
			note = fmt.Sprintf("reconcile: released the leftover hold of %d x %s by %s checkout %s", h.Quantity, sku, end.status, h.CheckoutID)
		}
		if errors.Is(err, lua.ErrHoldCommitted) || errors.Is(err, lua.ErrHoldReleased) || errors.Is(err, lua.ErrNoHold) {
			res.Unexplained = append(res.Unexplained, fmt.Sprintf("%s: hold of %s could not be ended: %v", sku, h.CheckoutID, err))
			continue
		}
		if err != nil {
			return err
		}
		if err := a.Store.ledgerNote(ctx, sku, h.CheckoutID, note); err != nil {
			return err
		}
		res.Corrections = append(res.Corrections, note)
	}
	return nil
}

type checkoutEnd struct {
	status  string
	endedAt *time.Time
}

func (s *Store) allSKUs(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT sku FROM skus ORDER BY sku`)
	if err != nil {
		return nil, fmt.Errorf("list skus: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (s *Store) checkoutEnds(ctx context.Context, ids []string) (map[string]checkoutEnd, error) {
	rows, err := s.pool.Query(ctx, `SELECT checkout_id, status, ended_at FROM checkouts WHERE checkout_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read checkout ends: %w", err)
	}
	defer rows.Close()
	ends := map[string]checkoutEnd{}
	for rows.Next() {
		var id string
		var e checkoutEnd
		if err := rows.Scan(&id, &e.status, &e.endedAt); err != nil {
			return nil, fmt.Errorf("read checkout ends: %w", err)
		}
		ends[id] = e
	}
	return ends, rows.Err()
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
		var onHand, maxPerOrder, gen int64
		err := tx.QueryRow(ctx, `SELECT on_hand, max_per_order, redis_gen FROM skus WHERE sku = $1 FOR UPDATE`, sku).Scan(&onHand, &maxPerOrder, &gen)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // never stocked: a reserve's "not stocked" stands
		}
		if err != nil {
			return fmt.Errorf("lock sku: %w", err)
		}
		open, err := openHolds(ctx, tx, sku)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
		defer cancel()
		live, err := stock.Holds(rctx, sku)
		if err != nil {
			return err
		}
		settled, err := settledHolds(ctx, tx, sku, live)
		if err != nil {
			return err
		}
		r, err := stock.Reconcile(rctx, sku, onHand, open, settled, gen)
		if err != nil {
			return err
		}
		if !r.Stocked {
			level, rebuilt, err := stock.Rebuild(rctx, sku, onHand, maxPerOrder, open, settled, gen)
			if err != nil || !rebuilt {
				return err
			}
			// Not a ledger note: a SKU's first load takes this path too.
			note = fmt.Sprintf("reconcile: %s rebuilt from postgres after redis lost it", sku)
			_, err = tx.Exec(ctx, `UPDATE skus SET redis_gen = $2 WHERE sku = $1`, sku, level.Gen)
			return err
		}
		if r.Before != r.After || r.Restored > 0 || r.RolledBack {
			note = fmt.Sprintf("reconcile: redis available of %s %d -> %d (on_hand %d), %d lost holds of open checkouts restored", sku, r.Before, r.After, onHand, r.Restored)
			if r.RolledBack {
				note += "; redis had gone back in time"
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE skus SET redis_gen = $2 WHERE sku = $1`, sku, r.Gen); err != nil {
			return fmt.Errorf("record redis gen: %w", err)
		}
		if note == "" {
			return nil
		}
		_, err = tx.Exec(ctx, `INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason) VALUES ($1, 0, 0, $2)`, sku, note)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("reconcile %s: %w", sku, err)
	}
	return note, nil
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

// ledgerNote appends a correction that changes neither on_hand nor sold.
func (s *Store) ledgerNote(ctx context.Context, sku, checkoutID, note string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason, checkout_id) VALUES ($1, 0, 0, $2, NULLIF($3, ''))`,
		sku, note, checkoutID)
	if err != nil {
		return fmt.Errorf("append ledger note for %s: %w", sku, err)
	}
	return nil
}
