package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/shop"
)

// ReconcileScheduleID is the Temporal Schedule that runs ReconcilePayments.
const ReconcileScheduleID = "checkout-reconcile-payments"

// ReconcileEvery is how often missed webhooks are looked for: a lost webhook then costs a
// buyer at most this long before the saga learns of the payment.
const ReconcileEvery = time.Minute

// ReconcileInput says which checkouts to ask the provider about.
type ReconcileInput struct {
	// WithinSeconds: checkouts whose hold expires within this many seconds (default 300).
	WithinSeconds int64 `json:"within_seconds"`
	// Provider is the payment provider to ask (default stripe).
	Provider string `json:"provider"`
}

// ReconcileResult counts what a run found.
type ReconcileResult struct {
	Checked   int `json:"checked"`
	Delivered int `json:"delivered"`
}

// reconcileLimit bounds one run; the next run picks up the rest.
const reconcileLimit = 500

var reconcileOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
}

// ReconcilePayments asks the payment provider about checkouts still awaiting payment near
// their deadline and feeds any settled payment into the saga as if its webhook had arrived.
// The saga ignores a payment it has already seen (same event id or same payment reference),
// so reconciling a checkout whose webhook did arrive changes nothing.
func ReconcilePayments(ctx workflow.Context, in ReconcileInput) (ReconcileResult, error) {
	if in.WithinSeconds <= 0 {
		in.WithinSeconds = 300
	}
	if in.Provider == "" {
		in.Provider = "stripe"
	}
	ctx = workflow.WithActivityOptions(ctx, reconcileOptions)
	deadline := workflow.Now(ctx).Add(time.Duration(in.WithinSeconds) * time.Second).UTC()
	query := fmt.Sprintf("WorkflowType = 'Checkout' AND ExecutionStatus = 'Running' AND CheckoutState = '%s' AND HoldExpiresAt < '%s'",
		shop.StatusAwaitingPayment, deadline.Format(time.RFC3339))

	var ids []string
	if err := workflow.ExecuteActivity(ctx, acts.ListWorkflowIDs, activities.ListWorkflowsInput{Query: query, Limit: reconcileLimit}).Get(ctx, &ids); err != nil {
		return ReconcileResult{}, err
	}
	res := ReconcileResult{Checked: len(ids)}
	// Older runs asked for one payment per checkout, which an earlier payment of the wrong
	// amount could hide (review L8); newer ones deliver every succeeded payment found.
	every := workflow.GetVersion(ctx, reconcileEveryPayment, workflow.DefaultVersion, 1) == 1
	for _, wfID := range ids {
		checkoutID, ok := CheckoutIDOf(wfID)
		if !ok {
			continue
		}
		found, err := findPayments(ctx, every, activities.FindPaymentInput{Provider: in.Provider, CheckoutID: checkoutID})
		if err != nil {
			workflow.GetLogger(ctx).Warn("ask provider about checkout", "checkout_id", checkoutID, "error", err)
			continue
		}
		for _, f := range found {
			p := shop.Payment{Provider: in.Provider, EventID: "reconcile-" + f.Ref, Outcome: shop.PaymentSucceeded,
				PaymentRef: f.Ref, AmountCents: f.AmountCents, Currency: f.Currency}
			if err := workflow.SignalExternalWorkflow(ctx, wfID, "", SignalPayment, p).Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Warn("deliver reconciled payment", "checkout_id", checkoutID, "error", err)
				continue
			}
			res.Delivered++
		}
	}
	return res, nil
}

// reconcileEveryPayment is the workflow.GetVersion change id of delivering every succeeded
// payment of a checkout, not only the first the provider lists.
const reconcileEveryPayment = "reconcile-every-payment"

// findPayments asks the provider for the checkout's succeeded payments: all of them, or (a run
// recorded before reconcileEveryPayment) the first.
func findPayments(ctx workflow.Context, every bool, in activities.FindPaymentInput) ([]activities.FoundPayment, error) {
	if every {
		var found []activities.FoundPayment
		err := workflow.ExecuteActivity(ctx, acts.FindSucceededPayments, in).Get(ctx, &found)
		return found, err
	}
	var found *activities.FoundPayment
	if err := workflow.ExecuteActivity(ctx, acts.FindSucceededPayment, in).Get(ctx, &found); err != nil || found == nil {
		return nil, err
	}
	return []activities.FoundPayment{*found}, nil
}

// CheckoutIDOf is the inverse of WorkflowID.
func CheckoutIDOf(workflowID string) (string, bool) {
	const prefix = "checkout-"
	if len(workflowID) <= len(prefix) || workflowID[:len(prefix)] != prefix {
		return "", false
	}
	return workflowID[len(prefix):], true
}
