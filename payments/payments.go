// Package payments is the payment provider as the checkout saga needs it: refund a payment that
// arrived too late or for the wrong amount, and find a succeeded payment whose webhook never
// arrived. Stripe is the one implementation (stripe.go), on stripe-go's client.
//
// Every call is safe to retry: a refund carries an idempotency key derived by the caller from the
// checkout and the payment, so Temporal retrying the activity never refunds twice. Errors are
// split the way the saga branches on them: ErrRefundRefused (the provider said no, for good),
// ErrInvalidRequest (our own input can never be sent), and everything else (network, timeouts,
// 5xx, rate limits), which is retryable.
package payments

import (
	"context"
	"errors"
	"regexp"
)

// Provider is a payment provider as the saga needs it.
type Provider interface {
	// Name is the provider's name as recorded with payment events: "stripe".
	Name() string
	// Refund refunds a payment in full (or AmountCents if > 0). IdempotencyKey is derived by the
	// caller from the checkout and payment (e.g. "refund-<checkout>-<payment_ref>") so a retry
	// never refunds twice.
	Refund(ctx context.Context, r RefundRequest) (Refund, error)
	// FindSucceeded returns the succeeded payments whose metadata.checkout_id is checkoutID
	// (up to MaxFound, oldest first where the provider says), or none. All of them, not the
	// first: an earlier payment of the wrong amount must not hide the right one. A payment
	// refunded in full or in part is left out, though the provider may still call it
	// succeeded (Stripe does): money given back is no payment for a checkout to keep.
	FindSucceeded(ctx context.Context, checkoutID string) ([]Payment, error)
}

// MaxFound bounds the payments FindSucceeded returns for one checkout: one page of the
// provider's search. A checkout is paid once; more than a few payments for one is a client bug
// the audit reports, and the saga refunds every one it does not keep.
const MaxFound = 10

// RefundRequest asks for one refund of one payment.
type RefundRequest struct {
	// PaymentRef is the provider's payment id (a Stripe PaymentIntent id, pi_...).
	PaymentRef string
	// AmountCents is the amount to refund; 0 refunds whatever is left of the payment.
	AmountCents int64
	// Currency is the currency the caller believes the payment is in. The provider refunds in the
	// payment's own currency; this is recorded in the refund's metadata for support.
	Currency string
	// IdempotencyKey makes a repeated request return the first refund instead of a second one.
	// Required; at most 255 characters (Stripe's limit).
	IdempotencyKey string
	// Reason is free text stored in the refund's metadata (Stripe's own reason field takes only
	// three fixed values).
	Reason string
}

// Refund is a refund as the provider reports it.
type Refund struct {
	// ID is the provider's refund id (re_...). It is empty when the payment had already been
	// refunded in full before this request (Stripe's charge_already_refunded): the money is back
	// with the customer, but this request created nothing.
	ID string
	// Status is succeeded, pending, failed, canceled or requires_action.
	Status string
	// AmountCents is the amount refunded by this refund (0 when ID is empty).
	AmountCents int64
}

// Payment is a succeeded payment found at the provider.
type Payment struct {
	Ref         string // the provider's payment id (pi_...)
	CheckoutID  string // metadata.checkout_id
	AmountCents int64  // the amount received (the amount asked for when the provider reports none)
	Currency    string // lower-case ISO code, e.g. "usd"
}

// Refund statuses, as Stripe names them.
const (
	RefundSucceeded      = "succeeded"
	RefundPending        = "pending"
	RefundFailed         = "failed"
	RefundCanceled       = "canceled"
	RefundRequiresAction = "requires_action"
)

var (
	// ErrRefundRefused means the provider refuses the refund for good (the charge is disputed, the
	// payment does not exist, the amount is more than is left): retrying cannot help, support must
	// look. It is wrapped with the provider's message. Network errors, timeouts, 5xx and rate
	// limits never wrap it.
	ErrRefundRefused = errors.New("refund refused by payment provider")
	// ErrInvalidRequest means the caller's input can never be sent (no idempotency key, a checkout
	// id that is not a valid id, a negative amount); nothing was sent to the provider.
	ErrInvalidRequest = errors.New("invalid payment request")
)

// checkoutIDPattern is the contract's id format. FindSucceeded puts the id inside a quoted search
// query, so anything outside it (a quote, a space, "AND") could change the query's meaning.
var checkoutIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
