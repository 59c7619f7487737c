package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Refund is a refund's state (steps.RecordRefundInput).
type Refund struct {
	ID               string
	CheckoutID       string
	Provider         string
	PaymentRef       string
	AmountCents      int64
	Currency         string
	Reason           string
	Status           string
	ProviderRefundID string
}

// ErrPaymentKept means a refund was asked for a payment that paid an order: the payment is
// that order's, and is not given back.
var ErrPaymentKept = errors.New("the payment paid an order")

// RecordRefund upserts a refund's state; a refund that was recorded as refunded stays so. A
// new refund of a payment that paid an order is refused with ErrPaymentKept, and nothing is
// written: every payment is one order or one refund. (A saga's run can meet an order it did
// not write, and judge the payment late: an earlier attempt of its workflow task wrote the
// order in a local activity, and the attempt was lost.) The checkout's row is locked first,
// so a confirm in flight commits before the order is looked for.
func (s *Store) RecordRefund(ctx context.Context, in Refund) error {
	var kept *string
	b := &pgx.Batch{}
	b.Queue(`SELECT 1 FROM checkouts WHERE checkout_id = $1 FOR SHARE`, in.CheckoutID)
	b.Queue(`
		WITH kept AS (
			SELECT order_id FROM orders WHERE payment_provider = $3 AND payment_ref = $4
				AND NOT EXISTS (SELECT 1 FROM refunds WHERE refund_key = $1)),
		up AS (
			INSERT INTO refunds (refund_key, checkout_id, provider, payment_ref, amount_cents, currency, reason, status, provider_refund_id)
			SELECT $1, $2, $3, $4, $5, $6, $7, $8, NULLIF($9, '') WHERE NOT EXISTS (SELECT 1 FROM kept)
			ON CONFLICT (refund_key) DO UPDATE SET status = EXCLUDED.status,
				provider_refund_id = COALESCE(EXCLUDED.provider_refund_id, refunds.provider_refund_id), updated_at = now()
			WHERE refunds.status <> 'refunded')
		SELECT (SELECT order_id FROM kept LIMIT 1)`,
		in.ID, in.CheckoutID, in.Provider, in.PaymentRef, in.AmountCents, in.Currency, in.Reason, in.Status, in.ProviderRefundID).
		QueryRow(func(row pgx.Row) error { return row.Scan(&kept) })
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record refund %s: %w", in.ID, err)
	}
	if kept != nil {
		return fmt.Errorf("record refund %s of %s payment %s: order %s: %w", in.ID, in.Provider, in.PaymentRef, *kept, ErrPaymentKept)
	}
	return nil
}
