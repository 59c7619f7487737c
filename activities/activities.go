// Package activities holds every side effect of the checkout saga: stock holds in Redis
// (through package lua), the checkout record, order confirmation and the inventory ledger in
// Postgres. Each activity is keyed by the checkout, so Temporal may retry any of them.
//
// Errors follow one rule: "no" is not "broken". An answer that will not change on retry
// (out of stock, a hold that already ended) is a non-retryable ApplicationError whose type is
// one of the ErrType constants; the workflow branches on those types. Anything else (a
// timeout, a dropped connection) is returned wrapped and Temporal retries it.
package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/payments"
)

// Error types of non-retryable activity failures. Workflows branch on these, never on text.
const (
	ErrTypeOutOfStock     = "OutOfStock"
	ErrTypeOverLimit      = "OverLimit"
	ErrTypeNotStocked     = "NotStocked"
	ErrTypeHoldEnded      = "HoldEnded"
	ErrTypeHoldCommitted  = "HoldCommitted"
	ErrTypeHoldReleased   = "HoldReleased"
	ErrTypeNoHold         = "NoHold"
	ErrTypeUnknownSKU     = "UnknownSKU"
	ErrTypeMixedCurrency  = "MixedCurrency"
	ErrTypeStockMismatch  = "StockMismatch"
	ErrTypeInvalidRequest = "InvalidRequest"
)

// Item is one line of a cart. UnitPriceCents is filled in from the catalog when the
// checkout is recorded.
type Item struct {
	SKU            string `json:"sku"`
	Quantity       int64  `json:"quantity"`
	UnitPriceCents int64  `json:"unit_price_cents"`
}

// Activities are the saga's steps. Register a *Activities with the worker.
type Activities struct {
	Store *Store
	Stock *lua.Stock
	// Payments are the configured payment providers by name ("stripe"), for refunds and
	// reconciliation; a checkout whose refund has no provider is flagged for support.
	Payments map[string]payments.Provider
	// Temporal is used by ListWorkflowIDs (visibility queries for reconciliation).
	Temporal client.Client
}

// RecordCheckoutInput is the cart as the client sent it.
type RecordCheckoutInput struct {
	CheckoutID string `json:"checkout_id"`
	CustomerID string `json:"customer_id"`
	Items      []Item `json:"items"`
}

// RecordCheckout prices the cart from the catalog and records the checkout in Postgres.
// Recording the same checkout again returns what was recorded the first time.
func (a *Activities) RecordCheckout(ctx context.Context, in RecordCheckoutInput) (CheckoutRecord, error) {
	skus := make([]string, len(in.Items))
	for i, it := range in.Items {
		skus[i] = it.SKU
	}
	products, err := a.Store.Products(ctx, skus)
	if err != nil {
		return CheckoutRecord{}, fmt.Errorf("price checkout %s: %w", in.CheckoutID, err)
	}
	rec := CheckoutRecord{CheckoutID: in.CheckoutID, CustomerID: in.CustomerID}
	for _, it := range in.Items {
		p, ok := products[it.SKU]
		if !ok {
			return CheckoutRecord{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("price checkout %s: unknown sku %s", in.CheckoutID, it.SKU), ErrTypeUnknownSKU, nil, it.SKU)
		}
		if rec.Currency == "" {
			rec.Currency = p.Currency
		}
		if p.Currency != rec.Currency {
			return CheckoutRecord{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("price checkout %s: sku %s is priced in %s, the cart in %s", in.CheckoutID, it.SKU, p.Currency, rec.Currency),
				ErrTypeMixedCurrency, nil, it.SKU)
		}
		rec.Items = append(rec.Items, Item{SKU: it.SKU, Quantity: it.Quantity, UnitPriceCents: p.PriceCents})
		rec.AmountCents += it.Quantity * p.PriceCents
	}
	return a.Store.insertCheckout(ctx, rec)
}

// StockInput names one SKU of one checkout.
type StockInput struct {
	CheckoutID string `json:"checkout_id"`
	SKU        string `json:"sku"`
	Quantity   int64  `json:"quantity"`
	// Reason is why a hold is released (expired, cancelled, ...); used for metrics and logs.
	Reason string `json:"reason,omitempty"`
}

// Shortage is the detail of an OutOfStock failure.
type Shortage struct {
	SKU       string `json:"sku"`
	Requested int64  `json:"requested"`
	Available int64  `json:"available"`
}

// ReserveStock holds Quantity units of SKU for the checkout, atomically in Redis.
func (a *Activities) ReserveStock(ctx context.Context, in StockInput) (lua.ReserveResult, error) {
	res, err := a.Stock.Reserve(ctx, in.SKU, in.CheckoutID, in.Quantity)
	if errors.Is(err, lua.ErrNotStocked) {
		// Redis does not know the SKU. If Postgres does, Redis lost it (a restart without
		// persistence): rebuild it from Postgres before taking any hold, then try again.
		rebuilt, rerr := a.Store.RebuildStock(ctx, a.Stock, in.SKU)
		if rerr != nil {
			return res, fmt.Errorf("reserve %s for checkout %s: %w", in.SKU, in.CheckoutID, rerr)
		}
		if rebuilt {
			activity.GetLogger(ctx).Warn("stock rebuilt from postgres after redis lost it", "sku", in.SKU)
		}
		res, err = a.Stock.Reserve(ctx, in.SKU, in.CheckoutID, in.Quantity)
	}
	var oos *lua.OutOfStockError
	var over *lua.OverLimitError
	switch {
	case err == nil:
		if !res.AlreadyHeld {
			metrics.Holds.WithLabelValues(in.SKU).Add(float64(in.Quantity))
		}
		activity.GetLogger(ctx).Info("stock held", "checkout_id", in.CheckoutID, "sku", in.SKU, "quantity", in.Quantity)
		return res, nil
	case errors.As(err, &oos):
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeOutOfStock, nil,
			Shortage{SKU: in.SKU, Requested: in.Quantity, Available: oos.Available})
	case errors.As(err, &over):
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeOverLimit, nil,
			Shortage{SKU: in.SKU, Requested: in.Quantity, Available: over.MaxPerOrder})
	case errors.Is(err, lua.ErrNotStocked):
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeNotStocked, nil,
			Shortage{SKU: in.SKU, Requested: in.Quantity})
	case errors.Is(err, lua.ErrHoldEnded):
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeHoldEnded, nil)
	case errors.Is(err, lua.ErrInvalidArgument):
		return res, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidRequest, nil)
	default:
		return res, err
	}
}

// ReleaseStock returns the checkout's hold on SKU to stock. It is the compensation of
// ReserveStock and is registered before the reserve runs, so it must also succeed when no
// hold was ever taken (it then leaves a tombstone that refuses a late reserve).
func (a *Activities) ReleaseStock(ctx context.Context, in StockInput) (int64, error) {
	released, err := a.Stock.Release(ctx, in.SKU, in.CheckoutID)
	switch {
	case err == nil:
		if released > 0 {
			metrics.Releases.WithLabelValues(in.SKU, in.Reason).Add(float64(released))
		}
		activity.GetLogger(ctx).Info("stock released", "checkout_id", in.CheckoutID, "sku", in.SKU,
			"units", released, "reason", in.Reason)
		return released, nil
	case errors.Is(err, lua.ErrHoldCommitted):
		return 0, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeHoldCommitted, nil)
	case errors.Is(err, lua.ErrInvalidArgument):
		return 0, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidRequest, nil)
	default:
		return 0, err
	}
}

// CommitStock turns the checkout's hold on SKU into a sale. Run it only after the order is
// confirmed in Postgres.
func (a *Activities) CommitStock(ctx context.Context, in StockInput) (int64, error) {
	committed, err := a.Stock.Commit(ctx, in.SKU, in.CheckoutID)
	switch {
	case err == nil:
		return committed, nil
	case errors.Is(err, lua.ErrHoldReleased):
		return 0, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeHoldReleased, nil)
	case errors.Is(err, lua.ErrNoHold):
		// The order is confirmed, so its units already left on_hand in Postgres. No hold
		// to commit means Redis lost it (a restart) and the rebuild did not count this
		// checkout, which had already ended in Postgres: nothing is left to do.
		activity.GetLogger(ctx).Warn("no hold to commit (redis lost it); nothing to do", "checkout_id", in.CheckoutID, "sku", in.SKU)
		return 0, nil
	case errors.Is(err, lua.ErrInvalidArgument):
		return 0, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidRequest, nil)
	default:
		return 0, err
	}
}

// ConfirmOrderInput is everything the order row needs.
type ConfirmOrderInput struct {
	CheckoutID      string `json:"checkout_id"`
	CustomerID      string `json:"customer_id"`
	Items           []Item `json:"items"`
	AmountCents     int64  `json:"amount_cents"`
	Currency        string `json:"currency"`
	PaymentProvider string `json:"payment_provider"`
	PaymentRef      string `json:"payment_ref"`
	// ExpiresAt is when the payment hold would have run out, kept for support.
	ExpiresAt *time.Time `json:"expires_at"`
}

// OrderID is the id of the order that confirms a checkout: derived from the checkout, so a
// retried confirmation can only ever name one order.
func OrderID(checkoutID string) string { return "ord-" + checkoutID }

// ConfirmOrder writes the order, takes its units from on_hand into sold, appends the ledger
// and marks the checkout confirmed, in one transaction; idempotent per checkout.
func (a *Activities) ConfirmOrder(ctx context.Context, in ConfirmOrderInput) (string, error) {
	orderID, created, err := a.Store.confirmOrder(ctx, in)
	if errors.Is(err, errInsufficientOnHand) || errors.Is(err, errCheckoutEnded) || errors.Is(err, errPaidOtherwise) {
		return "", temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeStockMismatch, nil)
	}
	if err != nil {
		return "", err
	}
	if created {
		metrics.Confirmations.Inc()
		metrics.Outcomes.WithLabelValues("confirmed").Inc()
	}
	activity.GetLogger(ctx).Info("order confirmed", "checkout_id", in.CheckoutID, "order_id", orderID)
	return orderID, nil
}

// RecordOutcomeInput is how a checkout that was not confirmed ended.
type RecordOutcomeInput struct {
	CheckoutID string `json:"checkout_id"`
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	// ExpiresAt is when the payment hold ran out or would have (nil if never held).
	ExpiresAt *time.Time `json:"expires_at"`
}

// RecordOutcome stores how a checkout ended; only the first end is kept.
func (a *Activities) RecordOutcome(ctx context.Context, in RecordOutcomeInput) error {
	if err := a.Store.recordOutcome(ctx, in); err != nil {
		return err
	}
	metrics.Outcomes.WithLabelValues(in.Status).Inc()
	return nil
}
