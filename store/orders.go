package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/checkout-saga/checkout-saga/shop"
)

// ErrInsufficientOnHand means Postgres has fewer units than an order needs: the Redis holds
// and Postgres disagree, which support must look at.
var ErrInsufficientOnHand = errors.New("postgres on_hand is lower than the order's quantity")

// ErrPaidOtherwise means the checkout's order exists and names another payment.
var ErrPaidOtherwise = errors.New("the order was paid by another payment")

// ErrCheckoutEnded means an order was asked for a checkout that already ended otherwise.
var ErrCheckoutEnded = errors.New("the checkout already ended without an order")

// Order is everything the order row needs (activities.ConfirmOrderInput).
type Order struct {
	CheckoutID      string
	CustomerID      string
	Items           []shop.Item
	AmountCents     int64
	Currency        string
	PaymentProvider string
	PaymentRef      string
	// ExpiresAt is when the payment hold would have run out, kept for support.
	ExpiresAt *time.Time
}

// ConfirmOrder writes the order, its lines, the stock change, the ledger rows and the
// checkout's end in one transaction. A second call for the same checkout finds the order
// (orders.checkout_id is unique) and returns it without changing anything.
func (s *Store) ConfirmOrder(ctx context.Context, in Order) (orderID string, created bool, err error) {
	orderID = shop.OrderID(in.CheckoutID)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			INSERT INTO orders (order_id, checkout_id, customer_id, amount_cents, currency, payment_provider, payment_ref)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (checkout_id) DO NOTHING`,
			orderID, in.CheckoutID, in.CustomerID, in.AmountCents, in.Currency, in.PaymentProvider, in.PaymentRef)
		if err != nil {
			return fmt.Errorf("insert order: %w", err)
		}
		if tag.RowsAffected() == 0 {
			// Confirmed by an earlier attempt, if that attempt was for this payment. An
			// order paid by another payment is not this payment's: it must be refunded.
			var provider, ref string
			if err := tx.QueryRow(ctx, `SELECT payment_provider, payment_ref FROM orders WHERE checkout_id = $1`,
				in.CheckoutID).Scan(&provider, &ref); err != nil {
				return fmt.Errorf("read existing order: %w", err)
			}
			if provider != in.PaymentProvider || ref != in.PaymentRef {
				return fmt.Errorf("order %s was paid by %s payment %s: %w", orderID, provider, ref, ErrPaidOtherwise)
			}
			return nil
		}
		created = true
		for _, it := range in.Items {
			if _, err := tx.Exec(ctx, `
				INSERT INTO order_lines (order_id, sku, quantity, unit_price_cents) VALUES ($1, $2, $3, $4)`,
				orderID, it.SKU, it.Quantity, it.UnitPriceCents); err != nil {
				return fmt.Errorf("insert order line %s: %w", it.SKU, err)
			}
			tag, err := tx.Exec(ctx, `
				UPDATE skus SET on_hand = on_hand - $2, sold = sold + $2, updated_at = now()
				WHERE sku = $1 AND on_hand >= $2`, it.SKU, it.Quantity)
			if err != nil {
				return fmt.Errorf("take %d x %s from on_hand: %w", it.Quantity, it.SKU, err)
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("take %d x %s from on_hand: %w", it.Quantity, it.SKU, ErrInsufficientOnHand)
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason, checkout_id)
				VALUES ($1, $2, $3, 'sold', $4)`, it.SKU, -it.Quantity, it.Quantity, in.CheckoutID); err != nil {
				return fmt.Errorf("append ledger for %s: %w", it.SKU, err)
			}
		}
		tag, err = tx.Exec(ctx, `
			UPDATE checkouts SET status = 'confirmed', order_id = $2, reason = NULL, expires_at = $3,
				ended_at = now(), updated_at = now()
			WHERE checkout_id = $1 AND ended_at IS NULL`, in.CheckoutID, orderID, in.ExpiresAt)
		if err != nil {
			return fmt.Errorf("mark checkout confirmed: %w", err)
		}
		if tag.RowsAffected() == 0 {
			// A checkout that already ended (expired, cancelled) released its units:
			// confirming it now would sell stock that is no longer held.
			return fmt.Errorf("mark checkout confirmed: %w", ErrCheckoutEnded)
		}
		return nil
	})
	if err != nil {
		return "", false, fmt.Errorf("confirm order for checkout %s: %w", in.CheckoutID, err)
	}
	return orderID, created, nil
}

// OrderPaymentRef returns the payment reference recorded on the checkout's order.
func (s *Store) OrderPaymentRef(ctx context.Context, checkoutID string) (string, error) {
	var ref string
	err := s.pool.QueryRow(ctx, `SELECT payment_ref FROM orders WHERE checkout_id = $1`, checkoutID).Scan(&ref)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("read order of checkout %s: %w", checkoutID, shop.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("read order of checkout %s: %w", checkoutID, err)
	}
	return ref, nil
}
