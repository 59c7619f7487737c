package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
)

// StockScheduleID is the Temporal Schedule that runs ReconcileStock.
const StockScheduleID = "checkout-reconcile-stock"

// StockReconcileEvery: drift is rare (it needs a crash or a lost Redis), so every five
// minutes bounds how long stock can be undersold without loading Redis or Postgres.
const StockReconcileEvery = 5 * time.Minute

var reconcileStockOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * time.Minute,
	HeartbeatTimeout:    time.Minute,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
}

// ReconcileStock compares Redis with Postgres and repairs drift in the safe direction (see
// activities.ReconcileStock). What it cannot explain flags this run for support: it shows
// in the UI under NeedsAttention = true, with the list in its current details.
func ReconcileStock(ctx workflow.Context, in steps.ReconcileStockInput) (steps.ReconcileStockResult, error) {
	var res steps.ReconcileStockResult
	ctx = workflow.WithActivityOptions(ctx, reconcileStockOptions)
	if err := workflow.ExecuteActivity(ctx, steps.ReconcileStock, in).Get(ctx, &res); err != nil {
		return res, err
	}
	if workflow.GetVersion(ctx, reconcileStockRefunds, workflow.DefaultVersion, 1) == 1 {
		if err := startSettledRefunds(ctx, res.Refunds); err != nil {
			return res, err
		}
	}
	if len(res.Unexplained) > 0 {
		_ = workflow.UpsertTypedSearchAttributes(ctx, AttrNeedsAttention.ValueSet(true))
		workflow.SetCurrentDetails(ctx, "NEEDS ATTENTION: stock the reconciler cannot explain:\n- "+strings.Join(res.Unexplained, "\n- "))
	} else {
		workflow.SetCurrentDetails(ctx, "Reconciled; corrections: "+strings.Join(res.Corrections, "; "))
	}
	return res, nil
}

// SettleWorkflowID is the id of the SettleCheckout run of a checkout: one at a time, and a
// webhook that meets a run in progress waits for that run.
func SettleWorkflowID(checkoutID string) string { return "settle-" + checkoutID }

// SettleCheckout settles one checkout whose saga is closed without having recorded its end,
// as the stock reconciler does for every such checkout (activities.SettleCheckout): it ends
// the checkout, releases its holds and starts the refunds of its payments, at once. A payment
// webhook that meets such a saga runs it, so the money need not wait for the next run.
func SettleCheckout(ctx workflow.Context, checkoutID string) (steps.SettleCheckoutResult, error) {
	var res steps.SettleCheckoutResult
	ctx = workflow.WithActivityOptions(ctx, reconcileOptions)
	err := workflow.ExecuteActivity(ctx, steps.SettleCheckout, steps.SettleCheckoutInput{CheckoutID: checkoutID}).Get(ctx, &res)
	if err != nil {
		return res, err
	}
	return res, startSettledRefunds(ctx, res.Refunds)
}

// startSettledRefunds starts the refund of each payment of a checkout settled without its
// saga. Postgres routed each to a refund in the transaction that ended the checkout; the
// Refund workflow's id is the payment's, so a payment is refunded once however often it is
// started (by a webhook, the orphan sweep, or a retry of this run).
func startSettledRefunds(ctx workflow.Context, refunds []shop.StaleOrphan) error {
	for _, o := range refunds {
		p := shop.Payment{Provider: o.Provider, EventID: o.EventID, PaymentRef: o.PaymentRef, AmountCents: o.AmountCents, Currency: o.Currency}
		refund := RefundOf(o.CheckoutID, "", p, "its checkout's saga closed without an end")
		err := startRefund(ctx, refund, fmt.Sprintf("Refund payment %s of settled checkout %s", refund.PaymentRef, o.CheckoutID))
		if err != nil {
			return fmt.Errorf("start refund of payment %s of checkout %s: %w", refund.PaymentRef, o.CheckoutID, err)
		}
	}
	return nil
}
