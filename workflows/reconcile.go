package workflows

import (
	"fmt"
	"iter"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
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
	// PageSize: checkouts one run asks about (default reconcileLimit). A run that finds more
	// continues as new with the next page, so in a sale with thousands of checkouts near
	// their deadline every one is asked about, not the same first page each minute.
	PageSize int `json:"page_size,omitempty"`

	// Set by the run that continued as new, for the next page of the same query.
	Deadline  *time.Time       `json:"deadline,omitempty"`
	PageToken []byte           `json:"page_token,omitempty"`
	SoFar     *ReconcileResult `json:"so_far,omitempty"`
}

// ReconcileResult counts what a run found, with the runs before it in its chain.
type ReconcileResult struct {
	Checked   int `json:"checked"`
	Delivered int `json:"delivered"`
	Pages     int `json:"pages,omitempty"`
	// EndedChecked and Refunded: checkouts that ended unpaid within the window, and the
	// payments found for them whose refund this run started (a saga that ended while the
	// webhook of its payment was lost kept the money until the provider's retry came).
	EndedChecked int `json:"ended_checked,omitempty"`
	Refunded     int `json:"refunded,omitempty"`
}

// reconcileLimit bounds one run; the next run picks up the rest.
const reconcileLimit = 500

// reconcileParallel is how many checkouts a run asks the provider about at once: a page is
// checked in seconds, well inside ReconcileEvery, and the provider's rate limit is far.
const reconcileParallel = 16

var reconcileOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
}

// ReconcilePayments asks the payment provider about checkouts still awaiting payment near
// their deadline and feeds any settled payment into the saga as if its webhook had arrived,
// unless Postgres already routes it to a refund (withoutRefunding). The saga ignores a
// payment it has already seen (same event id or same payment reference), so reconciling a
// checkout whose webhook did arrive changes nothing. The first run of a
// chain also refunds payments of checkouts that ended unpaid meanwhile (refundEndedUnpaid).
func ReconcilePayments(ctx workflow.Context, in ReconcileInput) (ReconcileResult, error) {
	if in.WithinSeconds <= 0 {
		in.WithinSeconds = 300
	}
	if in.Provider == "" {
		in.Provider = "stripe"
	}
	if in.PageSize <= 0 {
		in.PageSize = reconcileLimit
	}
	ctx = workflow.WithActivityOptions(ctx, reconcileOptions)
	deadline := workflow.Now(ctx).Add(time.Duration(in.WithinSeconds) * time.Second).UTC()
	if in.Deadline != nil {
		deadline = *in.Deadline
	}
	query := fmt.Sprintf("WorkflowType = 'Checkout' AND ExecutionStatus = 'Running' AND CheckoutState = '%s' AND HoldExpiresAt < '%s'",
		shop.StatusAwaitingPayment, deadline.Format(time.RFC3339))
	if workflow.GetVersion(ctx, reconcilePages, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return reconcileFirstIDs(ctx, in, query)
	}

	var page steps.WorkflowPage
	err := workflow.ExecuteActivity(ctx, steps.ListWorkflowPage, steps.ListWorkflowPageInput{
		Query: query, PageSize: in.PageSize, PageToken: in.PageToken,
	}).Get(ctx, &page)
	if err != nil {
		return ReconcileResult{}, err
	}
	var res ReconcileResult
	if in.SoFar != nil {
		res = *in.SoFar
	} else {
		res.EndedChecked, res.Refunded = refundEndedUnpaid(ctx, in, workflow.Now(ctx).Add(-time.Duration(in.WithinSeconds)*time.Second).UTC())
	}
	res.Pages++
	res.Checked += len(page.IDs)
	for batch := range slices.Chunk(page.IDs, reconcileParallel) {
		res.Delivered += deliverFound(ctx, in.Provider, batch)
	}
	if len(page.NextPageToken) == 0 {
		return res, nil
	}
	next := in
	next.Deadline, next.PageToken, next.SoFar = &deadline, page.NextPageToken, &res
	return res, workflow.NewContinueAsNewError(ctx, ReconcilePayments, next)
}

// refundEndedUnpaid asks the provider about checkouts whose saga ended without an order since
// `since` (expired, cancelled, payment failed, failed; not out of stock, which never opened a
// payment window) and refunds every succeeded payment found: a payment whose webhook was lost
// and whose saga ended meanwhile. Postgres has the last word on the money, not the saga's
// state: the payment of an order that stands is never refunded (withoutDecided), as after a
// support reset that closed a confirmed saga as expired. A payment the saga or a late webhook
// already refunded has its Refund workflow under the same id, so it is not refunded twice.
// One page, the first run of a chain only; the window is the run's, so each ended checkout is
// asked about for a few runs and then left to the provider's own webhook retries.
func refundEndedUnpaid(ctx workflow.Context, in ReconcileInput, since time.Time) (checked, refunded int) {
	query := fmt.Sprintf("WorkflowType = 'Checkout' AND ExecutionStatus = 'Completed' AND CheckoutState IN ('%s', '%s', '%s', '%s') AND CloseTime > '%s'",
		shop.StatusExpired, shop.StatusCancelled, shop.StatusPaymentFailed, shop.StatusFailed, since.Format(time.RFC3339))
	var page steps.WorkflowPage
	err := workflow.ExecuteActivity(ctx, steps.ListWorkflowPage, steps.ListWorkflowPageInput{Query: query, PageSize: in.PageSize}).Get(ctx, &page)
	if err != nil {
		workflow.GetLogger(ctx).Warn("list checkouts that ended unpaid", "error", err)
		return 0, 0
	}
	for batch := range slices.Chunk(page.IDs, reconcileParallel) {
		for wfID, found := range findAll(ctx, in.Provider, batch) {
			checkoutID, _ := CheckoutIDOf(wfID)
			for _, f := range withoutDecided(ctx, in.Provider, wfID, found) {
				refund := RefundOf(checkoutID, "", foundPayment(in.Provider, f), "payment found by reconciliation after the checkout ended unpaid")
				summary := fmt.Sprintf("Refund payment %s of ended checkout %s", f.Ref, checkoutID)
				started, err := startNewRefund(ctx, refund, summary)
				if err != nil {
					workflow.GetLogger(ctx).Warn("refund payment of ended checkout", "workflow_id", wfID, "error", err)
				}
				if started {
					refunded++
				}
			}
		}
	}
	return len(page.IDs), refunded
}

// withoutDecided is found without the payments Postgres already gave an end: the payment of
// the checkout's order, which stands whatever the saga's state says, and one being refunded.
func withoutDecided(ctx workflow.Context, provider, wfID string, found []steps.FoundPayment) []steps.FoundPayment {
	return withoutFates(ctx, reconcileKeepsOrderPayments, provider, wfID, found, shop.PaymentFates.Decided)
}

// deliverFound asks the provider about each checkout of wfIDs at once, then signals every
// succeeded payment found into its saga, but one Postgres already routes to a refund
// (withoutRefunding). It returns how many it delivered.
func deliverFound(ctx workflow.Context, provider string, wfIDs []string) int {
	delivered := 0
	for wfID, found := range findAll(ctx, provider, wfIDs) {
		if found = withoutRefunding(ctx, provider, wfID, found); len(found) > 0 {
			delivered += deliver(ctx, provider, wfID, found)
		}
	}
	return delivered
}

// withoutRefunding is found without the payments Postgres routes to a refund: an orphan the
// sweep claimed, a payment with a refund recorded. A swept orphan is never matched again,
// also while the provider still lists it as succeeded (its refund waits for support, or has
// not reached the provider), or the buyer would get the order and the money back.
func withoutRefunding(ctx workflow.Context, provider, wfID string, found []steps.FoundPayment) []steps.FoundPayment {
	return withoutFates(ctx, reconcileSkipsRefunding, provider, wfID, found, func(f shop.PaymentFates, ref string) bool {
		return slices.Contains(f.Refunding, ref)
	})
}

// withoutFates is found without the payments whose fate in Postgres drop says is decided, for
// runs that took the change (runs recorded before it keep every payment). When Postgres
// cannot answer, nothing of the checkout is kept: the next run asks again.
func withoutFates(ctx workflow.Context, change, provider, wfID string, found []steps.FoundPayment, drop func(shop.PaymentFates, string) bool) []steps.FoundPayment {
	if workflow.GetVersion(ctx, change, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return found
	}
	fates, err := paymentFates(ctx, provider, wfID, found)
	if err != nil {
		workflow.GetLogger(ctx).Warn("read what postgres decided for payments found", "workflow_id", wfID, "change", change, "error", err)
		return nil
	}
	return slices.DeleteFunc(found, func(f steps.FoundPayment) bool { return drop(fates, f.Ref) })
}

// paymentFates asks Postgres what it already decided for the payments found for the
// checkout of saga wfID.
func paymentFates(ctx workflow.Context, provider, wfID string, found []steps.FoundPayment) (shop.PaymentFates, error) {
	checkoutID, _ := CheckoutIDOf(wfID)
	in := steps.PaymentFatesInput{Provider: provider, CheckoutID: checkoutID}
	for _, f := range found {
		in.Refs = append(in.Refs, f.Ref)
	}
	var fates shop.PaymentFates
	err := workflow.ExecuteActivity(ctx, steps.ReadPaymentFates, in).Get(ctx, &fates)
	return fates, err
}

// findAll asks the provider about the checkout of each of wfIDs at once and yields each
// workflow id with the succeeded payments found, in wfIDs' order. A checkout the provider
// could not answer for is logged and skipped.
func findAll(ctx workflow.Context, provider string, wfIDs []string) iter.Seq2[string, []steps.FoundPayment] {
	finds := make([]workflow.Future, len(wfIDs))
	for i, wfID := range wfIDs {
		if checkoutID, ok := CheckoutIDOf(wfID); ok {
			finds[i] = workflow.ExecuteActivity(ctx, steps.FindSucceededPayments,
				steps.FindPaymentInput{Provider: provider, CheckoutID: checkoutID})
		}
	}
	return func(yield func(string, []steps.FoundPayment) bool) {
		for i, wfID := range wfIDs {
			if finds[i] == nil {
				continue
			}
			var found []steps.FoundPayment
			if err := finds[i].Get(ctx, &found); err != nil {
				workflow.GetLogger(ctx).Warn("ask provider about checkout", "workflow_id", wfID, "error", err)
				continue
			}
			if len(found) > 0 && !yield(wfID, found) {
				return
			}
		}
	}
}

// deliver signals each payment found into the saga wfID, as its webhook would have, and
// returns how many signals it sent.
func deliver(ctx workflow.Context, provider, wfID string, found []steps.FoundPayment) int {
	sent := 0
	for _, f := range found {
		if err := workflow.SignalExternalWorkflow(ctx, wfID, "", SignalPayment, foundPayment(provider, f)).Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("deliver reconciled payment", "workflow_id", wfID, "error", err)
			continue
		}
		sent++
	}
	return sent
}

// foundPayment is a payment the provider reported, as its webhook would have told it: its
// event id is "reconcile-" and the payment's, so the saga sees a repeat as one payment.
func foundPayment(provider string, f steps.FoundPayment) shop.Payment {
	return shop.Payment{Provider: provider, EventID: "reconcile-" + f.Ref, Outcome: shop.PaymentSucceeded,
		PaymentRef: f.Ref, AmountCents: f.AmountCents, Currency: f.Currency}
}

// reconcileFirstIDs is the shape of runs recorded before reconcilePages: the first
// reconcileLimit ids, each checkout asked about in turn.
func reconcileFirstIDs(ctx workflow.Context, in ReconcileInput, query string) (ReconcileResult, error) {
	var ids []string
	if err := workflow.ExecuteActivity(ctx, steps.ListWorkflowIDs, steps.ListWorkflowsInput{Query: query, Limit: reconcileLimit}).Get(ctx, &ids); err != nil {
		return ReconcileResult{}, err
	}
	res := ReconcileResult{Checked: len(ids)}
	// Older runs asked for one payment per checkout, which an earlier payment of the wrong
	// amount could hide; newer ones deliver every succeeded payment found.
	every := workflow.GetVersion(ctx, reconcileEveryPayment, workflow.DefaultVersion, 1) == 1
	for _, wfID := range ids {
		checkoutID, ok := CheckoutIDOf(wfID)
		if !ok {
			continue
		}
		found, err := findPayments(ctx, every, steps.FindPaymentInput{Provider: in.Provider, CheckoutID: checkoutID})
		if err != nil {
			workflow.GetLogger(ctx).Warn("ask provider about checkout", "checkout_id", checkoutID, "error", err)
			continue
		}
		res.Delivered += deliver(ctx, in.Provider, wfID, found)
	}
	return res, nil
}

// findPayments asks the provider for the checkout's succeeded payments: all of them, or (a run
// recorded before reconcileEveryPayment) the first.
func findPayments(ctx workflow.Context, every bool, in steps.FindPaymentInput) ([]steps.FoundPayment, error) {
	if every {
		var found []steps.FoundPayment
		err := workflow.ExecuteActivity(ctx, steps.FindSucceededPayments, in).Get(ctx, &found)
		return found, err
	}
	var found *steps.FoundPayment
	if err := workflow.ExecuteActivity(ctx, steps.FindSucceededPayment, in).Get(ctx, &found); err != nil || found == nil {
		return nil, err
	}
	return []steps.FoundPayment{*found}, nil
}

// CheckoutIDOf is the inverse of WorkflowID.
func CheckoutIDOf(workflowID string) (string, bool) {
	const prefix = "checkout-"
	if len(workflowID) <= len(prefix) || workflowID[:len(prefix)] != prefix {
		return "", false
	}
	return workflowID[len(prefix):], true
}
