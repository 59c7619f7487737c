package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Checkout reads one checkout with its items.
func (s *Store) Checkout(ctx context.Context, checkoutID string) (shop.CheckoutRecord, error) {
	var c shop.CheckoutRecord
	var reason, orderID *string
	err := s.pool.QueryRow(ctx, `
		SELECT c.checkout_id, c.customer_id, c.status, c.currency, c.amount_cents, c.expires_at, c.reason, c.order_id,
			c.created_at, c.ended_at, coalesce(o.payment_provider, ''), coalesce(o.payment_ref, '')
		FROM checkouts c LEFT JOIN orders o ON o.checkout_id = c.checkout_id WHERE c.checkout_id = $1`, checkoutID).
		Scan(&c.CheckoutID, &c.CustomerID, &c.Status, &c.Currency, &c.AmountCents, &c.ExpiresAt, &reason, &orderID,
			&c.CreatedAt, &c.EndedAt, &c.PaymentProvider, &c.PaymentRef)
	if errors.Is(err, pgx.ErrNoRows) {
		return shop.CheckoutRecord{}, fmt.Errorf("read checkout %s: %w", checkoutID, shop.ErrNotFound)
	}
	if err != nil {
		return shop.CheckoutRecord{}, fmt.Errorf("read checkout %s: %w", checkoutID, err)
	}
	if reason != nil {
		c.Reason = *reason
	}
	if orderID != nil {
		c.OrderID = *orderID
	}
	rows, err := s.pool.Query(ctx, `
		SELECT sku, quantity, unit_price_cents FROM checkout_items WHERE checkout_id = $1 ORDER BY sku`, checkoutID)
	if err != nil {
		return shop.CheckoutRecord{}, fmt.Errorf("read items of checkout %s: %w", checkoutID, err)
	}
	c.Items, err = pgx.CollectRows(rows, pgx.RowToStructByPos[shop.Item])
	if err != nil {
		return shop.CheckoutRecord{}, fmt.Errorf("read items of checkout %s: %w", checkoutID, err)
	}
	return c, nil
}

// InsertCheckout records a new checkout with priced items. A checkout that already exists is
// left as it is and its stored items are returned, so a retried activity sees the same cart.
func (s *Store) InsertCheckout(ctx context.Context, c shop.CheckoutRecord, limits map[string]int64) (shop.CheckoutRecord, error) {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		refusal, err := s.overCustomerLimits(ctx, tx, c, limits)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO checkouts (checkout_id, customer_id, status, currency, amount_cents)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (checkout_id) DO NOTHING`,
			c.CheckoutID, c.CustomerID, shop.RecordOpen, c.Currency, c.AmountCents)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil // recorded by an earlier attempt
		}
		for _, it := range c.Items {
			if _, err := tx.Exec(ctx, `
				INSERT INTO checkout_items (checkout_id, sku, quantity, unit_price_cents) VALUES ($1, $2, $3, $4)`,
				c.CheckoutID, it.SKU, it.Quantity, it.UnitPriceCents); err != nil {
				return err
			}
		}
		if refusal != "" {
			// Recorded as ended, so a retry (and a GET after retention) answers the same.
			_, err = tx.Exec(ctx, `UPDATE checkouts SET status = $2, reason = $3, ended_at = now(), updated_at = now() WHERE checkout_id = $1`,
				c.CheckoutID, "out_of_stock", refusal)
		}
		return err
	})
	if err != nil {
		return shop.CheckoutRecord{}, fmt.Errorf("record checkout %s: %w", c.CheckoutID, err)
	}
	rec, err := s.Checkout(ctx, c.CheckoutID)
	if err != nil {
		return shop.CheckoutRecord{}, err
	}
	if rec.Payments, err = s.matchOrphans(ctx, c.CheckoutID); err != nil {
		return shop.CheckoutRecord{}, err
	}
	return rec, nil
}

// overCustomerLimits judges a new checkout against its customer's limits: the cap on open
// checkouts and each SKU's max_per_customer (limits, SKU -> units; SKUs without one absent),
// counted over the customer's open and confirmed checkouts. It takes a lock per customer
// first, held to the end of tx, so a customer's concurrent checkouts are judged one at a
// time against everything recorded before them: a thousand at once hold exactly the limit.
// It returns the refusal's reason, or "".
func (s *Store) overCustomerLimits(ctx context.Context, tx pgx.Tx, c shop.CheckoutRecord, limits map[string]int64) (string, error) {
	if s.MaxOpenPerCustomer <= 0 && len(limits) == 0 {
		return "", nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('checkout customer ' || $1, 0))`, c.CustomerID); err != nil {
		return "", fmt.Errorf("lock customer %s: %w", c.CustomerID, err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM checkouts WHERE checkout_id = $1)`, c.CheckoutID).Scan(&exists); err != nil || exists {
		return "", err // a retry: judged the first time
	}
	if s.MaxOpenPerCustomer > 0 {
		var open int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM checkouts WHERE customer_id = $1 AND ended_at IS NULL`, c.CustomerID).Scan(&open); err != nil {
			return "", fmt.Errorf("count open checkouts of customer %s: %w", c.CustomerID, err)
		}
		if open >= s.MaxOpenPerCustomer {
			return ReasonTooManyOpen, nil
		}
	}
	for _, it := range c.Items {
		limit, ok := limits[it.SKU]
		if !ok {
			continue
		}
		var units int64
		if err := tx.QueryRow(ctx, `
			SELECT coalesce(sum(ci.quantity), 0) FROM checkout_items ci JOIN checkouts co USING (checkout_id)
			WHERE co.customer_id = $1 AND ci.sku = $2 AND (co.ended_at IS NULL OR co.status = 'confirmed')`,
			c.CustomerID, it.SKU).Scan(&units); err != nil {
			return "", fmt.Errorf("count units of %s of customer %s: %w", it.SKU, c.CustomerID, err)
		}
		if units+it.Quantity > limit {
			return ReasonCustomerLimit, nil
		}
	}
	return "", nil
}

// Outcome is how a checkout that was not confirmed ended (activities.RecordOutcomeInput).
type Outcome struct {
	CheckoutID string
	Status     string
	Reason     string
	ExpiresAt  *time.Time
}

// RecordOutcome writes how a checkout ended. Only the first end is kept: a checkout that has
// ended is never rewritten, so a retry or a late duplicate changes nothing.
func (s *Store) RecordOutcome(ctx context.Context, in Outcome) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE checkouts SET status = $2, reason = NULLIF($3, ''), expires_at = $4, ended_at = now(), updated_at = now()
		WHERE checkout_id = $1 AND ended_at IS NULL`, in.CheckoutID, in.Status, in.Reason, in.ExpiresAt)
	if err != nil {
		return fmt.Errorf("record outcome %s of checkout %s: %w", in.Status, in.CheckoutID, err)
	}
	return nil
}

// CheckoutEnd is how a checkout ended, as the reconciler reads it; EndedAt is nil while open.
type CheckoutEnd struct {
	Status  string
	EndedAt *time.Time
}

// CheckoutEnds reads how the given checkouts ended; ids Postgres does not know are absent.
func (s *Store) CheckoutEnds(ctx context.Context, ids []string) (map[string]CheckoutEnd, error) {
	rows, err := s.pool.Query(ctx, `SELECT checkout_id, status, ended_at FROM checkouts WHERE checkout_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read checkout ends: %w", err)
	}
	defer rows.Close()
	ends := map[string]CheckoutEnd{}
	for rows.Next() {
		var id string
		var e CheckoutEnd
		if err := rows.Scan(&id, &e.Status, &e.EndedAt); err != nil {
			return nil, fmt.Errorf("read checkout ends: %w", err)
		}
		ends[id] = e
	}
	return ends, rows.Err()
}
