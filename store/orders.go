package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/checkout-saga/checkout-saga/shop"
)

// ErrInsufficientOnHand means Postgres has fewer units than an order needs: the Redis holds
// and Postgres disagree, which support must look at.
var ErrInsufficientOnHand = errors.New("postgres on_hand is lower than the order's quantity")

// checkViolation is Postgres's SQLSTATE for a row that breaks a CHECK constraint.
const checkViolation = "23514"

// ErrPaidOtherwise means the checkout's order exists and names another payment.
var ErrPaidOtherwise = errors.New("the order was paid by another payment")

// ErrCheckoutEnded means an order was asked for a checkout that already ended otherwise.
var ErrCheckoutEnded = errors.New("the checkout already ended without an order")

// ErrPaymentRefunded means an order was asked for a payment whose refund is recorded: the
// money is going back (a refund is never dropped), so it pays for nothing.
var ErrPaymentRefunded = errors.New("the payment is being refunded")

// ErrUnverifiedPayment means no verified event recorded the payment an order was asked for.
var ErrUnverifiedPayment = errors.New("no verified event recorded the payment")

// Order is everything the order row needs (steps.ConfirmOrderInput).
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

// confirmOrderSQL is ConfirmOrder's statement: $1 order, $2 checkout, $3 customer, $4 amount,
// $5 currency, $6 provider, $7 payment, $8 SKUs, $9 quantities, $10 unit prices, $11 the
// hold's expiry. It answers whether it wrote the order. Its EXISTS is paymentVerifiedSQL's
// question for this checkout: keep the two alike.
const confirmOrderSQL = `
	WITH open AS (
		SELECT checkout_id FROM checkouts WHERE checkout_id = $2 AND ended_at IS NULL
			AND EXISTS (SELECT 1 FROM payment_events
				WHERE provider = $6 AND payment_ref = $7 AND outcome = 'succeeded' AND checkout_id = $2
					AND amount_cents = $4 AND lower(coalesce(currency, '')) = lower($5))
			AND NOT EXISTS (SELECT 1 FROM refunds WHERE checkout_id = $2 AND provider = $6 AND payment_ref = $7)
		FOR UPDATE),
	ord AS (
		INSERT INTO orders (order_id, checkout_id, customer_id, amount_cents, currency, payment_provider, payment_ref)
		SELECT $1, checkout_id, $3, $4, $5, $6, $7 FROM open
		ON CONFLICT (checkout_id) DO NOTHING
		RETURNING order_id),
	lines AS (
		INSERT INTO order_lines (order_id, sku, quantity, unit_price_cents)
		SELECT ord.order_id, i.sku, i.quantity, i.price
		FROM ord, unnest($8::text[], $9::bigint[], $10::bigint[]) AS i (sku, quantity, price)),
	taken AS (
		UPDATE skus SET on_hand = on_hand - i.quantity, sold = sold + i.quantity, updated_at = now()
		FROM ord, unnest($8::text[], $9::bigint[]) AS i (sku, quantity)
		WHERE skus.sku = i.sku
		RETURNING skus.sku, i.quantity),
	ledger AS (
		INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason, checkout_id)
		SELECT sku, -quantity, quantity, 'sold', $2 FROM taken),
	ended AS (
		UPDATE checkouts SET status = 'confirmed', order_id = $1, reason = NULL, expires_at = $11,
			ended_at = now(), updated_at = now()
		FROM ord WHERE checkouts.checkout_id = $2)
	SELECT EXISTS (SELECT 1 FROM ord)`

// ConfirmOrder writes the order, its lines, the stock change, the ledger rows and the
// checkout's end in one statement: one round trip, which holds each SKU's row lock (every
// confirm of a hot SKU waits for it) only until its own commit. It first locks the
// checkout's row if it is still open and a verified event recorded the payment (a webhook
// whose signature the API checked, or the provider's own listing, for this checkout and
// exactly this amount), and writes only then, so an end recorded meanwhile (expired,
// cancelled) either comes first, and nothing is written, or waits for the order. A unit
// short in Postgres breaks skus' on_hand >= 0 check, which undoes the whole statement.
//
// A payment no verified event recorded is ErrUnverifiedPayment: only verified money pays,
// whoever asks. A payment whose refund is recorded is ErrPaymentRefunded: every payment is
// one order or one refund (RecordRefund refuses the other order of the two). The checkout's
// row is locked first, in the same round trip, so a refund in flight commits before the
// statement looks for it. A second call for the same checkout finds it ended and the order
// written, and returns the order without changing anything; an order paid by another payment is
// ErrPaidOtherwise, a checkout that ended without an order ErrCheckoutEnded.
func (s *Store) ConfirmOrder(ctx context.Context, in Order) (orderID string, created bool, err error) {
	orderID = shop.OrderID(in.CheckoutID)
	skus, quantities, prices := make([]string, len(in.Items)), make([]int64, len(in.Items)), make([]int64, len(in.Items))
	for i, it := range in.Items {
		skus[i], quantities[i], prices[i] = it.SKU, it.Quantity, it.UnitPriceCents
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT 1 FROM checkouts WHERE checkout_id = $1 FOR UPDATE`, in.CheckoutID)
	b.Queue(confirmOrderSQL,
		orderID, in.CheckoutID, in.CustomerID, in.AmountCents, in.Currency, in.PaymentProvider, in.PaymentRef,
		skus, quantities, prices, in.ExpiresAt).QueryRow(func(row pgx.Row) error { return row.Scan(&created) })
	err = s.pool.SendBatch(ctx, b).Close()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == checkViolation && pgErr.ConstraintName == "skus_on_hand_check" {
		return "", false, fmt.Errorf("confirm order for checkout %s: %s: %w", in.CheckoutID, pgErr.Detail, ErrInsufficientOnHand)
	}
	if err != nil {
		return "", false, fmt.Errorf("confirm order for checkout %s: %w", in.CheckoutID, err)
	}
	if created {
		return orderID, true, nil
	}
	// Nothing written: the payment is not verified, or the checkout is not open. Confirmed by
	// an earlier attempt, if that attempt was for this payment (an order paid by another
	// payment is not this payment's: it must be refunded), or ended otherwise. Read afresh:
	// the statement above read as of its start, before a confirm it waited for committed.
	switch verified, err := s.PaymentVerified(ctx, in.PaymentProvider, in.PaymentRef, in.CheckoutID, in.AmountCents, in.Currency); {
	case err != nil:
		return "", false, fmt.Errorf("confirm order for checkout %s: %w", in.CheckoutID, err)
	case !verified:
		return "", false, fmt.Errorf("confirm order for checkout %s: %s payment %s of %d %s: %w",
			in.CheckoutID, in.PaymentProvider, in.PaymentRef, in.AmountCents, in.Currency, ErrUnverifiedPayment)
	}
	var provider, ref *string
	var refunded bool
	if err := s.pool.QueryRow(ctx, `
		SELECT o.payment_provider, o.payment_ref,
			EXISTS (SELECT 1 FROM refunds r WHERE r.checkout_id = $1 AND r.provider = $2 AND r.payment_ref = $3)
		FROM checkouts c LEFT JOIN orders o USING (checkout_id) WHERE c.checkout_id = $1`,
		in.CheckoutID, in.PaymentProvider, in.PaymentRef).Scan(&provider, &ref, &refunded); errors.Is(err, pgx.ErrNoRows) {
		return "", false, fmt.Errorf("confirm order for checkout %s: %w", in.CheckoutID, shop.ErrNotFound)
	} else if err != nil {
		return "", false, fmt.Errorf("confirm order for checkout %s: read its end: %w", in.CheckoutID, err)
	}
	switch {
	case provider == nil && refunded:
		return "", false, fmt.Errorf("confirm order for checkout %s: %s payment %s: %w", in.CheckoutID, in.PaymentProvider, in.PaymentRef, ErrPaymentRefunded)
	case provider == nil:
		return "", false, fmt.Errorf("confirm order for checkout %s: %w", in.CheckoutID, ErrCheckoutEnded)
	case *provider != in.PaymentProvider || *ref != in.PaymentRef:
		return "", false, fmt.Errorf("confirm order for checkout %s: order %s was paid by %s payment %s: %w", in.CheckoutID, orderID, *provider, *ref, ErrPaidOtherwise)
	}
	return orderID, false, nil
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
