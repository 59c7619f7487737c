// Package workflows holds the Checkout saga. Its code is deterministic: every side effect is
// an activity (package activities), and time comes from workflow.Now.
//
// The saga, top to bottom, with the undo registered beside each step:
//
//  1. RecordCheckout: price the cart from the catalog and write the checkout to Postgres.
//     Nothing to undo; how the checkout ended is written at the end (RecordOutcome).
//  2. For every SKU, concurrently: register ReleaseStock, then run ReserveStock. The release
//     is registered first because a reserve can succeed in Redis and still look failed to
//     the workflow (a timeout after the script ran); releasing a hold that was never taken
//     is a harmless no-op that also refuses any late reserve.
//  3. Answer the reservation update: awaiting_payment, or out_of_stock with the shortages.
//  4. Wait for a payment event, a cancel, or the payment timer (durable: it survives worker
//     and server restarts).
//  5. Paid with the right amount and currency: ConfirmOrder in Postgres (order, lines,
//     on_hand/sold, ledger, in one transaction), then CommitStock for every hold.
//
// Every other end (out of stock, payment failed, expired, cancelled, a step that failed for
// good) runs the registered releases last-in-first-out on a disconnected context, so that
// cancelling the workflow itself still returns the stock, retrying each until it succeeds,
// and then records the end in Postgres.
//
// States never move backwards (Status.rank); a late or repeated event cannot reopen a
// finished checkout.
package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/activities"
)

// acts is used only to name activity methods; the worker registers the real instance.
var acts *activities.Activities

// Checkout is the saga of one checkout. Its id is WorkflowID(in.CheckoutID).
func Checkout(ctx workflow.Context, in Input) (View, error) {
	c := &checkout{
		in:    in,
		seen:  map[string]bool{},
		state: StatusReserving,
		view: View{
			CheckoutID: in.CheckoutID,
			WorkflowID: WorkflowID(in.CheckoutID),
			Status:     StatusReserving,
			CustomerID: in.CustomerID,
			Items:      in.Items,

			RequestHash:    in.RequestHash,
			IdempotencyKey: in.IdempotencyKey,
		},
	}
	if err := c.registerHandlers(ctx); err != nil {
		return View{}, err
	}
	c.run(ctx)
	// Let the reservation and cancel updates answer before the workflow closes.
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	return c.view, nil
}

// checkout is the saga's state. Only the workflow goroutine and its handlers touch it, and
// Temporal runs those one at a time.
type checkout struct {
	in    Input
	view  View
	state Status

	// undo holds the compensations registered so far, run last-in-first-out.
	undo []func(ctx workflow.Context, reason Status)

	rejectCode string
	seen       map[string]bool // payment event ids already handled
	paid       *Payment
	failedPay  *Payment
	cancelBy   string
	// pending holds payment events that arrived before the cart was priced; they are
	// applied once the amount to check them against is known.
	pending []Payment
	// late holds payment events that arrived once the checkout could no longer take them
	// (for the refund path).
	late []Payment
}

// run executes the saga's forward steps and ends it one way or another.
func (c *checkout) run(ctx workflow.Context) {
	logger := workflow.GetLogger(ctx)

	rec, err := c.record(ctx)
	if err != nil {
		c.end(ctx, c.failureStatus(err), reasonOf(err))
		return
	}
	c.view.Items, c.view.AmountCents, c.view.Currency = rec.Items, rec.AmountCents, rec.Currency
	c.upsert(ctx, AttrAmountCents.ValueSet(rec.AmountCents))
	for _, p := range c.pending {
		c.applyPayment(ctx, p)
	}
	c.pending = nil

	if err := c.holdAll(ctx); err != nil {
		c.end(ctx, c.failureStatus(err), reasonOf(err))
		return
	}

	timeout := paymentTimeout(c.in.PaymentTimeoutSeconds)
	// Rounded up to the second: the buyer never gets less than the window they were promised.
	expiresAt := workflow.Now(ctx).Add(timeout + time.Second - 1).UTC().Truncate(time.Second)
	c.view.ExpiresAt = &expiresAt
	c.setState(ctx, StatusAwaitingPayment, "", AttrHoldExpiresAt.ValueSet(expiresAt))
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Waiting for payment of %s until %s", money(c.view.AmountCents, c.view.Currency), expiresAt.Format(time.RFC3339)))

	ready, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
		Timeout:      expiresAt.Sub(workflow.Now(ctx)),
		TimerOptions: workflow.TimerOptions{Summary: "Payment window until " + expiresAt.Format(time.RFC3339)},
	}, func() bool { return c.paid != nil || c.failedPay != nil || c.cancelBy != "" })

	switch {
	case temporal.IsCanceledError(err):
		c.end(ctx, StatusCancelled, "workflow cancelled")
	case err != nil:
		c.end(ctx, StatusFailed, "wait for payment: "+err.Error())
	case c.paid != nil: // a payment that arrived with a cancel still wins: money was taken
		c.confirm(ctx, *c.paid)
	case c.failedPay != nil:
		c.end(ctx, StatusPaymentFailed, "payment failed ("+c.failedPay.EventID+")")
	case c.cancelBy != "":
		c.end(ctx, StatusCancelled, "cancelled by "+c.cancelBy)
	case !ready:
		c.end(ctx, StatusExpired, "no payment before "+expiresAt.Format(time.RFC3339))
	}
	if len(c.late) > 0 {
		logger.Warn("payment events arrived after the checkout could take them", "count", len(c.late))
	}
}

// record prices the cart and writes the checkout to Postgres.
func (c *checkout) record(ctx workflow.Context) (activities.CheckoutRecord, error) {
	var rec activities.CheckoutRecord
	lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(recordOptions, "Record checkout "+c.in.CheckoutID))
	err := workflow.ExecuteLocalActivity(lctx, acts.RecordCheckout, activities.RecordCheckoutInput{
		CheckoutID: c.in.CheckoutID, CustomerID: c.in.CustomerID, Items: c.in.Items,
	}).Get(ctx, &rec)
	return rec, err
}

// holdAll reserves every SKU concurrently. Each release is registered before its reserve is
// scheduled. It returns the first refusal (out of stock beats other errors, so the client
// learns about every short SKU).
func (c *checkout) holdAll(ctx workflow.Context) error {
	futures := make([]workflow.Future, len(c.view.Items))
	for i, it := range c.view.Items {
		in := activities.StockInput{CheckoutID: c.in.CheckoutID, SKU: it.SKU, Quantity: it.Quantity}
		c.undo = append(c.undo, func(ctx workflow.Context, reason Status) {
			in := in
			in.Reason = string(reason)
			c.undoStep(ctx, fmt.Sprintf("Release %d x %s (%s)", in.Quantity, in.SKU, reason), acts.ReleaseStock, in)
		})
		lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(reserveOptions, fmt.Sprintf("Hold %d x %s", it.Quantity, it.SKU)))
		futures[i] = workflow.ExecuteLocalActivity(lctx, acts.ReserveStock, in)
	}
	var firstErr error
	for _, f := range futures {
		err := f.Get(ctx, nil)
		if err == nil {
			continue
		}
		var shortage activities.Shortage
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == activities.ErrTypeOutOfStock && appErr.Details(&shortage) == nil {
			c.view.Shortages = append(c.view.Shortages, shortage)
		}
		if firstErr == nil || isType(err, activities.ErrTypeOutOfStock) && !isType(firstErr, activities.ErrTypeOutOfStock) {
			firstErr = err
		}
	}
	return firstErr
}

// confirm turns a payment into an order: Postgres first (the record of the sale), then the
// Redis holds are committed.
func (c *checkout) confirm(ctx workflow.Context, p Payment) {
	c.setState(ctx, StatusConfirming, "")
	workflow.SetCurrentDetails(ctx, "Paid ("+p.EventID+"): confirming the order")
	dctx, _ := workflow.NewDisconnectedContext(ctx)

	var orderID string
	err := c.mustRunGet(dctx, "Confirm order in Postgres", acts.ConfirmOrder, activities.ConfirmOrderInput{
		CheckoutID: c.in.CheckoutID, CustomerID: c.in.CustomerID, Items: c.view.Items,
		AmountCents: c.view.AmountCents, Currency: c.view.Currency,
		PaymentProvider: p.Provider, PaymentRef: p.PaymentRef, ExpiresAt: c.view.ExpiresAt,
	}, &orderID)
	if err != nil {
		// The order could not be written for good (Postgres disagrees with the holds).
		// Nothing was sold: release the holds; the payment needs a refund, so flag it.
		c.view.NeedsAttention = true
		c.end(ctx, StatusFailed, "confirm order: "+reasonOf(err))
		return
	}
	c.view.OrderID = &orderID

	futures := make([]workflow.Future, len(c.view.Items))
	for i, it := range c.view.Items {
		actx := workflow.WithActivityOptions(dctx, withSummary(mustFinishOptions, fmt.Sprintf("Commit %d x %s", it.Quantity, it.SKU)))
		futures[i] = workflow.ExecuteActivity(actx, acts.CommitStock,
			activities.StockInput{CheckoutID: c.in.CheckoutID, SKU: it.SKU, Quantity: it.Quantity})
	}
	for _, f := range futures {
		if err := f.Get(dctx, nil); err != nil {
			// The order stands (it is in Postgres); a hold that cannot be committed means
			// Redis and Postgres disagree, which support must reconcile.
			c.view.NeedsAttention = true
			c.view.Reason = ptr("commit hold: " + reasonOf(err))
		}
	}
	c.setState(ctx, StatusConfirmed, "")
	workflow.SetCurrentDetails(ctx, "Confirmed as order "+orderID)
}

// end finishes a checkout that was not confirmed: release every hold, last registered first,
// on a disconnected context (so a cancelled workflow still releases), then record the end.
func (c *checkout) end(ctx workflow.Context, status Status, reason string) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.SetCurrentDetails(dctx, fmt.Sprintf("Ending as %s: releasing holds", status))
	for i := len(c.undo) - 1; i >= 0; i-- {
		c.undo[i](dctx, status)
	}
	c.undo = nil
	c.undoStep(dctx, "Record outcome "+string(status), acts.RecordOutcome, activities.RecordOutcomeInput{
		CheckoutID: c.in.CheckoutID, Status: string(status), Reason: reason, ExpiresAt: c.view.ExpiresAt,
	})
	c.setState(dctx, status, reason)
	workflow.SetCurrentDetails(dctx, fmt.Sprintf("Ended as %s: %s", status, reason))
}

// undoStep runs a step of ending a checkout (see undoOptions), retrying until it succeeds.
func (c *checkout) undoStep(ctx workflow.Context, summary string, activity any, arg any) {
	lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(undoOptions, summary))
	if err := workflow.ExecuteLocalActivity(lctx, activity, arg).Get(ctx, nil); err != nil {
		// Only a named non-retryable error gets here (a release after commit, say): the
		// hold is not ours to release, which support must look at.
		c.view.NeedsAttention = true
		workflow.GetLogger(ctx).Error("compensation refused", "summary", summary, "error", err)
	}
}

// mustRunGet runs an activity of a paid checkout that must finish (see mustFinishOptions).
func (c *checkout) mustRunGet(ctx workflow.Context, summary string, activity any, arg any, result any) error {
	actx := workflow.WithActivityOptions(ctx, withSummary(mustFinishOptions, summary))
	return workflow.ExecuteActivity(actx, activity, arg).Get(ctx, result)
}

// setState moves the checkout forward and keeps the search attributes current. A move to
// an earlier or equal state is ignored: states never move backwards.
func (c *checkout) setState(ctx workflow.Context, s Status, reason string, extra ...temporal.SearchAttributeUpdate) {
	if s.rank() < c.state.rank() || c.state.Final() {
		return
	}
	c.state, c.view.Status = s, s
	if reason != "" {
		c.view.Reason = &reason
	}
	c.upsert(ctx, append(extra,
		AttrCheckoutState.ValueSet(string(s)),
		AttrNeedsAttention.ValueSet(c.view.NeedsAttention))...)
}

func (c *checkout) upsert(ctx workflow.Context, updates ...temporal.SearchAttributeUpdate) {
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}

// failureStatus maps a step's error to the end state.
func (c *checkout) failureStatus(err error) Status {
	if temporal.IsCanceledError(err) {
		return StatusCancelled
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return StatusFailed
	}
	switch appErr.Type() {
	case activities.ErrTypeOutOfStock, activities.ErrTypeNotStocked:
		c.rejectCode = RejectOutOfStock
		return StatusOutOfStock
	case activities.ErrTypeOverLimit:
		c.rejectCode = RejectOverLimit
		return StatusOutOfStock
	case activities.ErrTypeUnknownSKU:
		c.rejectCode = RejectUnknownSKU
		return StatusFailed
	case activities.ErrTypeMixedCurrency:
		c.rejectCode = RejectMixedCurrency
		return StatusFailed
	}
	return StatusFailed
}

// onPayment applies one verified payment event. Repeats (same event id) are ignored; events
// that arrive once the checkout can no longer take them are kept for the refund path.
func (c *checkout) onPayment(ctx workflow.Context, p Payment) {
	logger := workflow.GetLogger(ctx)
	if c.seen[p.EventID] {
		logger.Info("duplicate payment event ignored", "event_id", p.EventID)
		return
	}
	c.seen[p.EventID] = true
	if c.view.Currency == "" && !c.state.Final() {
		c.pending = append(c.pending, p)
		return
	}
	c.applyPayment(ctx, p)
}

// applyPayment decides what a new payment event does to the checkout.
func (c *checkout) applyPayment(ctx workflow.Context, p Payment) {
	logger := workflow.GetLogger(ctx)
	if c.state.rank() >= StatusConfirming.rank() || c.paid != nil || c.failedPay != nil || c.cancelBy != "" {
		c.late = append(c.late, p)
		logger.Warn("payment event after the checkout was decided", "event_id", p.EventID, "status", c.state)
		return
	}
	switch p.Outcome {
	case PaymentSucceeded:
		if p.AmountCents != c.view.AmountCents || !strings.EqualFold(p.Currency, c.view.Currency) {
			c.view.NeedsAttention = true
			reason := fmt.Sprintf("payment %s of %s does not match the checkout's %s", p.EventID,
				money(p.AmountCents, strings.ToLower(p.Currency)), money(c.view.AmountCents, c.view.Currency))
			c.view.Reason = &reason
			c.late = append(c.late, p)
			c.upsert(ctx, AttrNeedsAttention.ValueSet(true))
			logger.Warn("payment amount mismatch", "event_id", p.EventID)
			return
		}
		c.paid = &p
	case PaymentFailed:
		c.failedPay = &p
	}
}

func (c *checkout) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (View, error) { return c.view, nil }); err != nil {
		return fmt.Errorf("register status query: %w", err)
	}
	err := workflow.SetUpdateHandler(ctx, UpdateReservation, func(ctx workflow.Context, req ReservationRequest) (ReservationResult, error) {
		if err := workflow.Await(ctx, func() bool { return c.state != StatusReserving }); err != nil {
			return ReservationResult{}, err
		}
		return ReservationResult{
			View: c.view, Created: req.RequestID != "" && req.RequestID == c.in.RequestID,
			RequestHash: c.in.RequestHash, IdempotencyKey: c.in.IdempotencyKey, RejectCode: c.rejectCode,
		}, nil
	})
	if err != nil {
		return fmt.Errorf("register reservation update: %w", err)
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateCancel, func(ctx workflow.Context, req CancelRequest) (View, error) {
		if c.cancelBy == "" && c.paid == nil {
			c.cancelBy = req.By
		}
		if err := workflow.Await(ctx, func() bool { return c.state.Final() }); err != nil {
			return View{}, err
		}
		return c.view, nil
	}, workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req CancelRequest) error {
		if c.state == StatusConfirming || c.state == StatusConfirmed || c.paid != nil {
			return temporal.NewApplicationError("checkout is already paid and cannot be cancelled", ErrTypeAlreadyPaid)
		}
		if req.By != "customer" && req.By != "support" {
			return fmt.Errorf("cancel: by must be customer or support, not %q", req.By)
		}
		return nil
	}})
	if err != nil {
		return fmt.Errorf("register cancel update: %w", err)
	}
	payments := workflow.GetSignalChannel(ctx, SignalPayment)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var p Payment
			if !payments.Receive(ctx, &p) {
				return
			}
			c.onPayment(ctx, p)
		}
	})
	return nil
}

// ErrTypeAlreadyPaid is the error type of a cancel refused because the checkout was paid.
const ErrTypeAlreadyPaid = "AlreadyPaid"

func withSummary(o workflow.ActivityOptions, summary string) workflow.ActivityOptions {
	o.Summary = summary
	return o
}

func withLocalSummary(o workflow.LocalActivityOptions, summary string) workflow.LocalActivityOptions {
	o.Summary = summary
	return o
}

func isType(err error, t string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == t
}

// reasonOf is the human reason stored for an end: the innermost application error's message.
func reasonOf(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Error()
	}
	return err.Error()
}

func money(cents int64, currency string) string {
	return fmt.Sprintf("%d.%02d %s", cents/100, cents%100, strings.ToUpper(currency))
}

func ptr[T any](v T) *T { return &v }
