package store

import (
	"context"
	"fmt"
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

// RecordRefund upserts a refund's state; a refund that was recorded as refunded stays so.
func (s *Store) RecordRefund(ctx context.Context, in Refund) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO refunds (refund_key, checkout_id, provider, payment_ref, amount_cents, currency, reason, status, provider_refund_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULLIF($9, ''))
		ON CONFLICT (refund_key) DO UPDATE SET status = EXCLUDED.status,
			provider_refund_id = COALESCE(EXCLUDED.provider_refund_id, refunds.provider_refund_id), updated_at = now()
		WHERE refunds.status <> 'refunded'`,
		in.ID, in.CheckoutID, in.Provider, in.PaymentRef, in.AmountCents, in.Currency, in.Reason, in.Status, in.ProviderRefundID)
	if err != nil {
		return fmt.Errorf("record refund %s: %w", in.ID, err)
	}
	return nil
}
