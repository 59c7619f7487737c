// Package activities holds the saga's Temporal activities: thin adapters that call the
// Postgres store (package store), the stock scripts (package lua) and the payment providers
// (package payments), and map what they answer to Temporal's terms. Each activity is keyed by
// the checkout, so Temporal may retry any of them. Operators' stock changes are package
// inventory's, not an activity.
//
// Errors follow one rule: "no" is not "broken". An answer that will not change on retry
// (out of stock, a hold that already ended, an order Postgres cannot fill) is a
// non-retryable ApplicationError whose type is one of the shop.ErrType constants; the
// workflow branches on those types. Anything else (a timeout, a dropped connection) is
// returned wrapped and Temporal retries it.
package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
)

// Activities are the saga's steps. Register a *Activities with the worker.
type Activities struct {
	Store *store.Store
	Stock *lua.Stock
	// Payments are the configured payment providers by name ("stripe"), for refunds and
	// reconciliation; a checkout whose refund has no provider is flagged for support.
	Payments map[string]payments.Provider
	// Temporal is used by ListWorkflowIDs (visibility queries for reconciliation).
	Temporal client.Client
}

// RecordCheckout prices the cart from the catalog and records the checkout in Postgres.
// Recording the same checkout again returns what was recorded the first time.
func (a *Activities) RecordCheckout(ctx context.Context, in steps.RecordCheckoutInput) (shop.CheckoutRecord, error) {
	skus := make([]string, len(in.Items))
	for i, it := range in.Items {
		skus[i] = it.SKU
	}
	products, err := a.Store.Products(ctx, skus)
	if err != nil {
		return shop.CheckoutRecord{}, fmt.Errorf("price checkout %s: %w", in.CheckoutID, err)
	}
	rec := shop.CheckoutRecord{CheckoutID: in.CheckoutID, CustomerID: in.CustomerID, Fingerprint: in.Creator}
	limits := map[string]int64{}
	for _, it := range in.Items {
		p, ok := products[it.SKU]
		if !ok {
			return shop.CheckoutRecord{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("price checkout %s: unknown sku %s", in.CheckoutID, it.SKU), shop.ErrTypeUnknownSKU, nil, it.SKU)
		}
		if rec.Currency == "" {
			rec.Currency = p.Currency
		}
		if p.Currency != rec.Currency {
			return shop.CheckoutRecord{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("price checkout %s: sku %s is priced in %s, the cart in %s", in.CheckoutID, it.SKU, p.Currency, rec.Currency),
				shop.ErrTypeMixedCurrency, nil, it.SKU)
		}
		rec.Items = append(rec.Items, shop.Item{SKU: it.SKU, Quantity: it.Quantity, UnitPriceCents: p.PriceCents})
		if p.MaxPerCustomer > 0 {
			limits[it.SKU] = p.MaxPerCustomer
		}
		rec.AmountCents += it.Quantity * p.PriceCents
	}
	return a.Store.InsertCheckout(ctx, rec, limits)
}

// resynced runs a stock script once more after bringing the SKU back in line with Postgres,
// when the first run found that Redis went back in time (lua.ErrRolledBack: a restart from
// an older snapshot, a failover to a lagging replica) or, with notStocked, lost the SKU. No
// unit moves on such a Redis before every open checkout's hold is restored.
func (a *Activities) resynced(ctx context.Context, sku string, notStocked bool, run func() error) error {
	err := run()
	if !errors.Is(err, lua.ErrRolledBack) && !(notStocked && errors.Is(err, lua.ErrNotStocked)) {
		return err
	}
	note, rerr := a.Store.ResyncStock(ctx, a.Stock, sku)
	if rerr != nil {
		return fmt.Errorf("%w; then: %w", err, rerr)
	}
	activity.GetLogger(ctx).Warn("stock resynced from postgres: redis lost data", "sku", sku, "cause", err.Error(), "repair", note)
	return run()
}

// endHold runs one of the scripts that end the checkout's hold on the SKU (release, commit,
// forfeit) through resynced, and returns the units the hold had.
func (a *Activities) endHold(ctx context.Context, in steps.StockInput, end func(ctx context.Context, sku, checkoutID string) (int64, error)) (int64, error) {
	var units int64
	err := a.resynced(ctx, in.SKU, false, func() (err error) {
		units, err = end(ctx, in.SKU, in.CheckoutID)
		return err
	})
	return units, err
}

// ReserveStock holds Quantity units of SKU for the checkout, atomically in Redis.
func (a *Activities) ReserveStock(ctx context.Context, in steps.StockInput) (lua.ReserveResult, error) {
	var res lua.ReserveResult
	// Redis may not know the SKU. If Postgres does, Redis lost it (a restart without
	// persistence): it is rebuilt from Postgres before any hold is taken.
	err := a.resynced(ctx, in.SKU, true, func() (err error) {
		res, err = a.Stock.Reserve(ctx, in.SKU, in.CheckoutID, in.Quantity)
		return err
	})
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
		return res, temporal.NewNonRetryableApplicationError(err.Error(), shop.ErrTypeOutOfStock, nil,
			shop.Shortage{SKU: in.SKU, Requested: in.Quantity, Available: oos.Available})
	case errors.As(err, &over):
		return res, temporal.NewNonRetryableApplicationError(err.Error(), shop.ErrTypeOverLimit, nil,
			shop.Shortage{SKU: in.SKU, Requested: in.Quantity, Available: over.MaxPerOrder})
	case errors.Is(err, lua.ErrNotStocked):
		return res, temporal.NewNonRetryableApplicationError(err.Error(), shop.ErrTypeNotStocked, nil,
			shop.Shortage{SKU: in.SKU, Requested: in.Quantity})
	default:
		return res, holdRefusal(err)
	}
}

// holdRefusal maps the stock scripts' definite answers about a hold (it ended already, in
// one way or the other; an argument the script refused) to non-retryable application errors
// whose types the saga branches on. Any other error is returned as it is, for Temporal to
// retry. Each script answers only the codes of its own operation (see lua/doc.go), so one
// mapping serves reserve, release, commit and forfeit.
func holdRefusal(err error) error {
	var typ string
	switch {
	case errors.Is(err, lua.ErrHoldEnded):
		typ = shop.ErrTypeHoldEnded
	case errors.Is(err, lua.ErrHoldCommitted):
		typ = shop.ErrTypeHoldCommitted
	case errors.Is(err, lua.ErrHoldReleased):
		typ = shop.ErrTypeHoldReleased
	case errors.Is(err, lua.ErrInvalidArgument):
		typ = shop.ErrTypeInvalidRequest
	default:
		return err
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), typ, nil)
}

// ReleaseStock returns the checkout's hold on SKU to stock. It is the compensation of
// ReserveStock and is registered before the reserve runs, so it must also succeed when no
// hold was ever taken (it then leaves a tombstone that refuses a late reserve).
func (a *Activities) ReleaseStock(ctx context.Context, in steps.StockInput) (int64, error) {
	released, err := a.endHold(ctx, in, a.Stock.Release)
	switch {
	case err == nil:
		if released > 0 {
			metrics.Releases.WithLabelValues(in.SKU, in.Reason).Add(float64(released))
		}
		activity.GetLogger(ctx).Info("stock released", "checkout_id", in.CheckoutID, "sku", in.SKU,
			"units", released, "reason", in.Reason)
		return released, nil
	default:
		return 0, holdRefusal(err)
	}
}

// CommitStock turns the checkout's hold on SKU into a sale. Run it only after the order is
// confirmed in Postgres.
//
// No hold to commit (shop.ErrTypeNoHold, non-retryable) means Redis lost it: the order is
// confirmed and its units already left on_hand in Postgres, but if the SKU's Redis copy
// survived, available still counts them (a phantom unit another buyer would pay for and be
// refunded). CommitStock reconciles the SKU from Postgres first, which removes them, then
// returns the error so the saga flags the checkout for support.
func (a *Activities) CommitStock(ctx context.Context, in steps.StockInput) (int64, error) {
	committed, err := a.endHold(ctx, in, a.Stock.Commit)
	switch {
	case err == nil:
		return committed, nil
	case errors.Is(err, lua.ErrNoHold):
		note, rerr := a.Store.ResyncStock(ctx, a.Stock, in.SKU)
		if rerr != nil {
			return 0, fmt.Errorf("%w; then: %w", err, rerr) // retried: the repair must run
		}
		activity.GetLogger(ctx).Warn("no hold to commit: redis lost it; stock reconciled", "checkout_id", in.CheckoutID, "sku", in.SKU, "repair", note)
		return 0, temporal.NewNonRetryableApplicationError(err.Error()+" (redis lost the hold; the order stands and the sku was reconciled)", shop.ErrTypeNoHold, nil)
	default:
		return 0, holdRefusal(err)
	}
}

// ForfeitStock ends the checkout's hold on SKU WITHOUT giving its units back to available,
// then reconciles the SKU from Postgres. Call it instead of ReleaseStock for every SKU of a
// paid checkout whose ConfirmOrder failed with shop.ErrTypeStockMismatch: Postgres had fewer
// units than Redis let be held (Redis lost a hold and sold its unit twice), and releasing
// the loser's hold would put back a unit Postgres no longer has, to be sold and refunded
// again. The reconcile puts back exactly what Postgres has, so a SKU of the cart that was
// not short loses nothing. It returns the units the hold had; like ReleaseStock it succeeds
// when nothing was held or the hold already ended without a sale, and a committed hold is
// shop.ErrTypeHoldCommitted. Retrying is safe.
func (a *Activities) ForfeitStock(ctx context.Context, in steps.StockInput) (int64, error) {
	forfeited, err := a.endHold(ctx, in, a.Stock.Forfeit)
	if err != nil {
		return 0, holdRefusal(err)
	}
	note, err := a.Store.ResyncStock(ctx, a.Stock, in.SKU)
	if err != nil {
		return 0, fmt.Errorf("forfeit %s for checkout %s: %w", in.SKU, in.CheckoutID, err)
	}
	activity.GetLogger(ctx).Warn("stock hold forfeited: postgres had fewer units than redis held", "checkout_id", in.CheckoutID,
		"sku", in.SKU, "units", forfeited, "reason", in.Reason, "repair", note)
	return forfeited, nil
}

// ConfirmOrder writes the order, takes its units from on_hand into sold, appends the ledger
// and marks the checkout confirmed, in one statement, for a verified payment only (see
// store.ConfirmOrder); idempotent per checkout.
func (a *Activities) ConfirmOrder(ctx context.Context, in steps.ConfirmOrderInput) (string, error) {
	// Only verified money pays: anyone who reaches Temporal can signal a saga, so the store
	// confirms only a payment that a verified webhook or the provider's own listing recorded.
	orderID, created, err := a.Store.ConfirmOrder(ctx, store.Order(in))
	if errors.Is(err, store.ErrUnverifiedPayment) {
		metrics.UnverifiedPayments.Inc()
		return "", temporal.NewNonRetryableApplicationError(err.Error(), shop.ErrTypeUnverifiedPayment, nil)
	}
	if errors.Is(err, store.ErrPaymentRefunded) {
		return "", temporal.NewNonRetryableApplicationError(err.Error(), shop.ErrTypePaymentRefunded, nil)
	}
	if errors.Is(err, store.ErrInsufficientOnHand) || errors.Is(err, store.ErrCheckoutEnded) || errors.Is(err, store.ErrPaidOtherwise) {
		return "", temporal.NewNonRetryableApplicationError(err.Error(), shop.ErrTypeStockMismatch, nil)
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

// RecordOutcome stores how a checkout ended; only the first end is kept. It answers nil when
// this end was recorded, or the checkout with the end Postgres already held (the saga's run
// then answers that end: support reset a saga past its confirm, say).
func (a *Activities) RecordOutcome(ctx context.Context, in steps.RecordOutcomeInput) (*shop.CheckoutRecord, error) {
	earlier, err := a.Store.RecordOutcomeOrEarlier(ctx, store.Outcome(in))
	if err != nil {
		return nil, err
	}
	if earlier == nil {
		metrics.Outcomes.WithLabelValues(in.Status).Inc()
	}
	return earlier, nil
}
