// Package workflows holds the Checkout saga and its two helpers, Refund and
// ReconcilePayments. Their code is deterministic: every side effect is an activity (package
// activities), and time comes from workflow.Now.
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
//  4. Wait for a successful payment, a cancel, or the payment timer (durable: it survives
//     worker and server restarts; support may extend it). A failed card attempt is noted and
//     the wait goes on, because the buyer may retry with another card.
//  5. Paid with the right amount and currency: ConfirmOrder in Postgres (order, lines,
//     on_hand/sold, ledger, in one transaction), then CommitStock for every hold.
//
// Every other end (out of stock, payment failed, expired, cancelled, a step that failed for
// good) runs the registered releases last-in-first-out on a disconnected context, so that
// cancelling the workflow itself still returns the stock, and then records the end in
// Postgres. A step that keeps failing is never dropped: the checkout is flagged
// (NeedsAttention), its current details say what is wrong and what to do, and the step is
// tried again every few minutes or at once when support sends the retry update.
//
// Money that cannot be kept (a payment after the checkout ended, a second payment, a wrong
// amount or currency) is refunded by a Refund workflow started as an abandoned child.
//
// run() is the order of these steps, each a named method. What an unconfirmed end gives back
// (holds and money) is the undo stack in undo.go; whether the checkout is decided is answered
// in decision.go. States never move backwards (Status.rank); a late or repeated event cannot
// reopen a finished checkout.
package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/shop"
)

// acts is used only to name activity methods; the worker registers the real instance.
var acts *activities.Activities

// Checkout is the saga of one checkout. Its id is WorkflowID(in.CheckoutID).
func Checkout(ctx workflow.Context, in Input) (shop.View, error) {
	c := &checkout{
		in:         in,
		seenEvents: map[string]bool{},
		seenPaid:   map[string]bool{},
		state:      shop.StatusReserving,
		view: shop.View{
			CheckoutID: in.CheckoutID,
			WorkflowID: shop.WorkflowID(in.CheckoutID),
			Status:     shop.StatusReserving,
			CustomerID: in.CustomerID,
			Items:      shop.Unpriced(in.Items),

			RequestHash:    in.RequestHash,
			IdempotencyKey: in.IdempotencyKey,
		},
	}
	c.payments = workflow.GetSignalChannel(ctx, SignalPayment)
	c.wake = workflow.NewBufferedChannel(ctx, 1)
	if err := c.registerHandlers(ctx); err != nil {
		return shop.View{}, err
	}
	workflow.Go(ctx, c.startRefunds)
	c.run(ctx)
	// The checkout has ended. A payment still waiting in the channel, or one that arrives
	// before the workflow closes, cannot be kept: each is refunded (a duplicate of the one
	// that paid is ignored). Temporal refuses to close a workflow while a signal it has not
	// seen is pending, so no payment slips past this loop. The updates answer and every
	// refund starts before the workflow closes.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	for {
		c.drainPayments(dctx)
		_ = workflow.Await(dctx, func() bool {
			return c.payments.Len() > 0 || workflow.AllHandlersFinished(dctx) && !c.refundsPending()
		})
		if c.payments.Len() == 0 {
			return c.view, nil
		}
	}
}

// checkout is the saga's state. Only the workflow goroutines and handlers touch it, and
// Temporal runs those one at a time.
type checkout struct {
	in    Input
	view  shop.View
	state shop.Status

	// undo is what an unconfirmed end gives back: holds and money (undo.go).
	undo undo

	// payments carries the payment signals. Only the saga's main coroutine receives from it,
	// at the points where it decides, so a payment and the decision it could change (the
	// timer, a cancel, an out-of-stock answer) are ordered in one place, in history order.
	payments workflow.ReceiveChannel
	// wake is sent to by the update handlers (cancel, extend) to wake the payment wait.
	wake workflow.Channel
	// closing is set once the saga has chosen its end (see decision.go).
	closing bool
	// adopted is set when Postgres already recorded this cart's end (an earlier saga that
	// Temporal's retention dropped): this run only answers with that end.
	adopted bool

	rejectCode  string
	seenEvents  map[string]bool // payment events already handled, by paymentKey of the event id
	seenPaid    map[string]bool // payments already counted as paid (webhook or reconciliation), by paymentKey of the ref
	paid        *shop.Payment   // the payment that pays the checkout
	lastFailure *shop.Payment   // the latest failed attempt; the buyer may still retry
	canceledPay *shop.Payment   // the payment was canceled for good
	cancelBy    string

	holdStarted time.Time
	expiresAt   time.Time
	extended    bool // the hold was extended: the payment timer must restart

	// endVersion is the shape of the ending steps this saga runs (see endStepsChange).
	endVersion workflow.Version
	// forfeit ends the holds without returning their units (see confirm).
	forfeit bool

	stuck          string // the step waiting for support, if any
	retryRequested bool
	flagged        bool // something support must look at besides a stuck step (wrong money, ...)
}

// run is the saga: its named steps, in order. Every step that can end the checkout early
// ends it (end or adoptEnded) and run stops there.
func (c *checkout) run(ctx workflow.Context) {
	rec, err := c.record(ctx)
	if err != nil {
		c.end(ctx, c.failureStatus(err), reasonOf(err))
		return
	}
	if rec.Status != shop.RecordOpen {
		c.adoptEnded(ctx, rec)
		return
	}
	c.view.Items, c.view.AmountCents, c.view.Currency = rec.Items, rec.AmountCents, rec.Currency
	// Payments whose webhook came before this checkout existed (orphans) are applied with
	// the ones that come while reserving: once the holds are in place, or refunded after
	// the end when they are not.
	orphans := rec.Payments

	if err := c.holdAll(ctx); err != nil {
		c.end(ctx, c.failureStatus(err), reasonOf(err))
		c.applyOrphans(ctx, orphans)
		return
	}
	c.openPaymentWindow(ctx)
	// A payment that arrived while reserving counts: every hold is in place and the window
	// has just opened. A payment that arrived with a cancel still wins: money was taken
	// while the units were held for the buyer.
	c.applyOrphans(ctx, orphans)
	c.drainPayments(ctx)
	timedOut, err := c.awaitPayment(ctx)
	c.finish(ctx, timedOut, err)
}

// openPaymentWindow starts the hold's clock: every SKU is held and the buyer may pay.
func (c *checkout) openPaymentWindow(ctx workflow.Context) {
	c.holdStarted = workflow.Now(ctx)
	// Rounded up to the second: the buyer never gets less than the window they were promised.
	c.expiresAt = c.holdStarted.Add(paymentTimeout(c.in.PaymentTimeoutSeconds) + time.Second - 1).UTC().Truncate(time.Second)
	c.view.ExpiresAt = ptr(c.expiresAt)
	c.setState(ctx, shop.StatusAwaitingPayment, "", AttrHoldExpiresAt.ValueSet(c.expiresAt), AttrAmountCents.ValueSet(c.view.AmountCents))
}

// finish ends the payment wait the way it was decided: confirmed when paid, else ended.
func (c *checkout) finish(ctx workflow.Context, timedOut bool, err error) {
	switch {
	case temporal.IsCanceledError(err):
		c.end(ctx, shop.StatusCancelled, "workflow cancelled")
	case err != nil:
		c.end(ctx, shop.StatusFailed, "wait for payment: "+err.Error())
	case c.paid != nil: // a payment that arrived with a cancel still wins: money was taken
		c.confirm(ctx, *c.paid)
	case c.canceledPay != nil:
		c.end(ctx, shop.StatusPaymentFailed, "payment canceled ("+c.canceledPay.EventID+")")
	case c.cancelBy != "":
		c.end(ctx, shop.StatusCancelled, "cancelled by "+c.cancelBy)
	case timedOut && c.lastFailure != nil:
		c.end(ctx, shop.StatusPaymentFailed, "payment failed ("+c.lastFailure.EventID+") and no payment succeeded before "+c.expiresAt.Format(time.RFC3339))
	case timedOut:
		c.end(ctx, shop.StatusExpired, "no payment before "+c.expiresAt.Format(time.RFC3339))
	}
}

// awaitPayment waits until the checkout is decided or the payment timer fires. The timer is
// restarted when support extends the hold.
//
// The wait is one selector over the payment channel, the timer, the update wake-up and the
// workflow's cancellation. A selector that is waiting takes whichever becomes ready first in
// history order, so a payment recorded before the timer fired wins even when both reach the
// worker in one workflow task (a worker that was down across the deadline), and a payment
// recorded after it stays in the channel, to be refunded once the checkout has ended.
//
// That order holds only for the first event of a workflow task. Once the saga has handled it
// (a failed card, a wrong amount, a cancel update), the events behind it in the same task are
// already there when the saga looks again, and a selector takes the first ready case in the
// order its cases were added, history or not: the timer, before a payment recorded before it.
// So payments already waiting are taken before the saga acts on the timer or on a cancel
// (pendingPaymentsFirst): they reached the saga while it held every unit for the buyer.
func (c *checkout) awaitPayment(ctx workflow.Context) (timedOut bool, err error) {
	for !c.decided() {
		c.waitingDetails(ctx)
		c.extended = false
		// A timer left behind (paid, cancelled, extended) is not cancelled: cancelling costs
		// an event, and one that fires later only wakes the saga for nothing.
		timer := workflow.NewTimerWithOptions(ctx, max(c.expiresAt.Sub(workflow.Now(ctx)), 0),
			workflow.TimerOptions{Summary: "Payment window until " + c.expiresAt.Format(time.RFC3339)})
		var fired, cancelled bool
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(timer, func(f workflow.Future) {
			fired = true
			cancelled = temporal.IsCanceledError(f.Get(ctx, nil))
		})
		sel.AddReceive(c.payments, func(ch workflow.ReceiveChannel, _ bool) {
			var p shop.Payment
			ch.Receive(ctx, &p)
			c.onPayment(ctx, p)
		})
		sel.AddReceive(c.wake, func(ch workflow.ReceiveChannel, _ bool) { ch.Receive(ctx, nil) })
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { cancelled = true })
		for !fired && !cancelled && !c.decided() && !c.extended {
			if timer.IsReady() && c.pendingPaymentsFirst(ctx) {
				c.drainPayments(ctx)
				continue
			}
			sel.Select(ctx)
		}
		if c.decision() == cancelAsked && c.pendingPaymentsFirst(ctx) {
			c.drainPayments(ctx) // a payment that came with the cancel still wins (decision.go)
		}
		switch {
		case c.decided():
			return false, nil
		case cancelled:
			return false, temporal.NewCanceledError()
		case c.extended:
			continue // support moved the deadline: wait again with the new one
		case fired:
			return true, nil
		}
	}
	return false, nil
}

// pendingPaymentsFirst reports whether payments are waiting to be taken before the end the
// saga is about to act on. Sagas that met the race before pendingPaymentsChange replay the
// old choice.
func (c *checkout) pendingPaymentsFirst(ctx workflow.Context) bool {
	return c.payments.Len() > 0 && workflow.GetVersion(ctx, pendingPaymentsChange, workflow.DefaultVersion, 1) == 1
}

// drainPayments applies every payment waiting in the channel, in the order they arrived.
func (c *checkout) drainPayments(ctx workflow.Context) {
	for {
		var p shop.Payment
		if !c.payments.ReceiveAsync(&p) {
			return
		}
		c.onPayment(ctx, p)
	}
}

// applyOrphans applies the payments that were recorded for this checkout before it existed.
func (c *checkout) applyOrphans(ctx workflow.Context, orphans []shop.RecordedPayment) {
	for _, o := range orphans {
		c.onPayment(ctx, shop.Payment{Provider: o.Provider, EventID: o.EventID, Outcome: shop.PaymentKind(o.Outcome),
			PaymentRef: o.PaymentRef, AmountCents: o.AmountCents, Currency: o.Currency})
	}
}

// adoptEnded answers for a cart whose end Postgres already recorded: Temporal's retention
// dropped the saga that ended it, and the cart was posted again. An end is final forever, so
// this run takes that end as its own and stops: it holds no stock and records nothing.
func (c *checkout) adoptEnded(ctx workflow.Context, rec shop.CheckoutRecord) {
	c.adopted, c.closing = true, true
	if rec.PaymentRef != "" {
		// The payment that confirmed it, seen again (a redelivery under a new event id while
		// this run answers), is that order's: not a second payment to refund.
		c.seenPaid[c.paymentKey(ctx, rec.PaymentProvider, rec.PaymentRef)] = true
	}
	v := shop.ViewFromRecord(rec)
	v.RequestHash, v.IdempotencyKey = c.view.RequestHash, c.view.IdempotencyKey
	c.view = v
	if v.Status == shop.StatusOutOfStock {
		switch rec.Reason {
		case shop.RejectCustomerLimit:
			c.rejectCode = shop.RejectCustomerLimit
		case shop.RejectTooManyOpen:
			c.rejectCode = shop.RejectTooManyOpen
		default:
			c.rejectCode = shop.RejectOutOfStock
		}
	}
	c.setState(ctx, v.Status, "")
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Ended as %s earlier (recorded in Postgres); this run only answers with that end", v.Status))
	if len(rec.Payments) > 0 && workflow.GetVersion(ctx, adoptRefundsOrphansChange, workflow.DefaultVersion, 1) == 1 {
		// Payments that came before a checkout that had already ended (or was refused just
		// now) are not its order's: refunded, like any payment after the end.
		c.applyOrphans(ctx, rec.Payments)
	}
}

func (c *checkout) waitingDetails(ctx workflow.Context) {
	details := fmt.Sprintf("Waiting for payment of %s until %s", money(c.view.AmountCents, c.view.Currency), c.expiresAt.Format(time.RFC3339))
	if c.lastFailure != nil {
		details += fmt.Sprintf(". Last attempt failed (%s); the buyer may retry", c.lastFailure.EventID)
	}
	if c.flagged && c.view.Reason != nil {
		details = "NEEDS ATTENTION: " + *c.view.Reason + ". The payment is being refunded (see refunds); acknowledge with the acknowledge action once handled. " + details
	}
	workflow.SetCurrentDetails(ctx, details)
}

// record prices the cart and writes the checkout to Postgres.
func (c *checkout) record(ctx workflow.Context) (shop.CheckoutRecord, error) {
	var rec shop.CheckoutRecord
	lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(recordOptions, "Record checkout "+c.in.CheckoutID))
	err := workflow.ExecuteLocalActivity(lctx, acts.RecordCheckout, activities.RecordCheckoutInput{
		CheckoutID: c.in.CheckoutID, CustomerID: c.in.CustomerID, Items: shop.Unpriced(c.in.Items),
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
		c.registerRelease(in)
		lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(reserveOptions, fmt.Sprintf("Hold %d x %s", it.Quantity, it.SKU)))
		futures[i] = workflow.ExecuteLocalActivity(lctx, acts.ReserveStock, in)
	}
	var firstErr error
	for _, f := range futures {
		err := f.Get(ctx, nil)
		if err == nil {
			continue
		}
		var shortage shop.Shortage
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.Type() == shop.ErrTypeOutOfStock && appErr.Details(&shortage) == nil {
			c.view.Shortages = append(c.view.Shortages, shortage)
		}
		if firstErr == nil || IsErrorType(err, shop.ErrTypeOutOfStock) && !IsErrorType(firstErr, shop.ErrTypeOutOfStock) {
			firstErr = err
		}
	}
	return firstErr
}

// confirm turns a payment into an order: Postgres first (the record of the sale), then the
// Redis holds are committed.
func (c *checkout) confirm(ctx workflow.Context, p shop.Payment) {
	c.closing = true
	c.setState(ctx, shop.StatusConfirming, "")
	workflow.SetCurrentDetails(ctx, "Paid ("+p.EventID+"): confirming the order")
	dctx, _ := workflow.NewDisconnectedContext(ctx)

	var orderID string
	err := c.persist(dctx, "Confirm order in Postgres", func(ctx workflow.Context) error {
		lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(mustFinishOptions, "Confirm order in Postgres"))
		return workflow.ExecuteLocalActivity(lctx, acts.ConfirmOrder, activities.ConfirmOrderInput{
			CheckoutID: c.in.CheckoutID, CustomerID: c.in.CustomerID, Items: c.view.Items,
			AmountCents: c.view.AmountCents, Currency: c.view.Currency,
			PaymentProvider: p.Provider, PaymentRef: p.PaymentRef, ExpiresAt: c.view.ExpiresAt,
		}).Get(ctx, &orderID)
	})
	if IsErrorType(err, shop.ErrTypeUnverifiedPayment) {
		// A payment signal that no verified webhook or provider listing recorded: someone
		// signalled Temporal directly. It pays for nothing and there is no money to give
		// back (it may name another buyer's payment); the holds go back and support looks.
		c.flag(dctx)
		c.end(ctx, shop.StatusFailed, "refused an unverified payment: "+reasonOf(err))
		return
	}
	if err != nil {
		// The order could not be written for good (Postgres disagrees with the holds).
		// Nothing was sold: give the money back. The holds are forfeited, not released:
		// Postgres has fewer units than Redis counted, and releasing would publish a unit
		// that does not exist, for the next buyer to pay for and be refunded.
		c.forfeit = true
		c.flag(dctx)
		c.refund(p, "the order could not be confirmed: "+reasonOf(err))
		c.end(ctx, shop.StatusFailed, "confirm order: "+reasonOf(err))
		return
	}
	c.view.OrderID = &orderID

	for _, it := range c.view.Items {
		in := activities.StockInput{CheckoutID: c.in.CheckoutID, SKU: it.SKU, Quantity: it.Quantity}
		summary := fmt.Sprintf("Commit %d x %s", it.Quantity, it.SKU)
		err := c.persist(dctx, summary, func(ctx workflow.Context) error {
			lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(mustFinishOptions, summary))
			return workflow.ExecuteLocalActivity(lctx, acts.CommitStock, in).Get(ctx, nil)
		})
		if err != nil {
			// The order stands (it is in Postgres); a hold that cannot be committed means
			// Redis and Postgres disagree, which support must reconcile.
			c.flag(dctx)
			c.view.Reason = ptr("commit hold: " + reasonOf(err))
		}
	}
	c.setState(ctx, shop.StatusConfirmed, "")
	workflow.SetCurrentDetails(ctx, "Confirmed as order "+orderID)
}

// end finishes a checkout that was not confirmed: release every hold, last registered first,
// on a disconnected context (so a cancelled workflow still releases), then record the end.
func (c *checkout) end(ctx workflow.Context, status shop.Status, reason string) {
	c.closing = true
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.SetCurrentDetails(dctx, fmt.Sprintf("Ending as %s: releasing holds", status))
	recordOutcome := func(ctx workflow.Context) {
		c.undoStep(ctx, "Record outcome "+string(status), acts.RecordOutcome, activities.RecordOutcomeInput{
			CheckoutID: c.in.CheckoutID, Status: string(status), Reason: reason, ExpiresAt: c.view.ExpiresAt,
		})
	}
	// Sagas started before the ending steps became regular activities replay the old shape:
	// local activities, one after the other. New ones record the outcome, then run every
	// release at once: two round trips however many SKUs.
	c.endVersion = workflow.GetVersion(dctx, endStepsChange, workflow.DefaultVersion, 1)
	if c.endVersion == workflow.DefaultVersion {
		c.giveBackHolds(dctx, status)
		recordOutcome(dctx)
	} else {
		// The end is recorded before the holds are released. A rebuild of Redis (after it
		// lost its data) counts every checkout Postgres still has open as holding: released
		// first and recorded later, a checkout that ends while a rebuild reads Postgres would
		// get its hold back from the rebuild and keep it. Recorded first, the rebuild sees it
		// ended, or the release comes after the rebuild and ends the hold.
		recordOutcome(dctx)
		c.giveBackHolds(dctx, status)
	}
	c.setState(dctx, status, reason)
	workflow.SetCurrentDetails(dctx, fmt.Sprintf("Ended as %s: %s", status, reason))
}

// persist runs a step that must not be dropped. When its retry policy gives up, the
// checkout is flagged for support with what is wrong and what to do, and the step is tried
// again when support sends the retry update, or by itself after stuckRetryInterval, a wait
// that doubles each round up to stuckRetryMax, so a long outage adds few events a day. Only
// a non-retryable error (a definite "no") is returned.
func (c *checkout) persist(ctx workflow.Context, summary string, step func(workflow.Context) error) error {
	wait := stuckRetryInterval
	for {
		err := step(ctx)
		var appErr *temporal.ApplicationError
		if err == nil || errors.As(err, &appErr) && appErr.NonRetryable() || temporal.IsCanceledError(err) {
			if c.stuck != "" {
				c.stuck, c.view.Attention = "", ""
				c.refreshAttention(ctx)
			}
			return err
		}
		c.stuck = summary
		c.view.Attention = fmt.Sprintf("%s keeps failing: %s. Fix the cause (Redis, Postgres or the payment provider); the step is retried by itself in %s, or at once with the retry action (POST /v1/admin/checkouts/%s/retry).",
			summary, errorText(err), wait, c.in.CheckoutID)
		c.refreshAttention(ctx)
		workflow.SetCurrentDetails(ctx, "NEEDS ATTENTION: "+c.view.Attention)
		workflow.GetLogger(ctx).Error("step stuck", "step", summary, "error", err)
		_, _ = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
			Timeout:      wait,
			TimerOptions: workflow.TimerOptions{Summary: "Retry " + summary},
		}, func() bool { return c.retryRequested })
		c.retryRequested = false
		wait = min(2*wait, stuckRetryMax)
	}
}

// setState moves the checkout forward and keeps the search attributes current. A move to
// an earlier or equal state is ignored: states never move backwards.
func (c *checkout) setState(ctx workflow.Context, s shop.Status, reason string, extra ...temporal.SearchAttributeUpdate) {
	if s.Rank() < c.state.Rank() || c.state.Final() {
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

// flag marks the checkout for support.
func (c *checkout) flag(ctx workflow.Context) {
	c.flagged = true
	c.refreshAttention(ctx)
}

// refreshAttention keeps NeedsAttention (view and search attribute) equal to "flagged or stuck".
func (c *checkout) refreshAttention(ctx workflow.Context) {
	needs := c.flagged || c.stuck != ""
	if needs != c.view.NeedsAttention {
		c.view.NeedsAttention = needs
		c.upsert(ctx, AttrNeedsAttention.ValueSet(needs))
	}
}

func (c *checkout) upsert(ctx workflow.Context, updates ...temporal.SearchAttributeUpdate) {
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}

// failureStatus maps a step's error to the end state.
func (c *checkout) failureStatus(err error) shop.Status {
	if temporal.IsCanceledError(err) {
		return shop.StatusCancelled
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return shop.StatusFailed
	}
	r, ok := refusals[appErr.Type()]
	if !ok {
		return shop.StatusFailed
	}
	c.rejectCode = r.code
	return r.status
}

// refusals maps the error types of a step that refused the checkout to the reject code the
// buyer sees and the end state. shop.ErrTypeHoldEnded is this saga's own compensation: a
// workflow task that reserved, was refused, released, and was lost with its worker before it
// completed is run again and finds its tombstone. The lost run was refused; so is this one.
var refusals = map[string]struct {
	code   string
	status shop.Status
}{
	shop.ErrTypeOutOfStock:    {shop.RejectOutOfStock, shop.StatusOutOfStock},
	shop.ErrTypeNotStocked:    {shop.RejectOutOfStock, shop.StatusOutOfStock},
	shop.ErrTypeHoldEnded:     {shop.RejectOutOfStock, shop.StatusOutOfStock},
	shop.ErrTypeOverLimit:     {shop.RejectOverLimit, shop.StatusOutOfStock},
	shop.ErrTypeUnknownSKU:    {shop.RejectUnknownSKU, shop.StatusFailed},
	shop.ErrTypeMixedCurrency: {shop.RejectMixedCurrency, shop.StatusFailed},
}

// onPayment applies one verified payment event. Repeats (the same provider's event id, or
// the same successful payment seen through another channel) are ignored.
func (c *checkout) onPayment(ctx workflow.Context, p shop.Payment) {
	logger := workflow.GetLogger(ctx)
	event, ref := c.paymentKey(ctx, p.Provider, p.EventID), c.paymentKey(ctx, p.Provider, p.PaymentRef)
	if c.seenEvents[event] || p.Outcome == shop.PaymentSucceeded && p.PaymentRef != "" && c.seenPaid[ref] {
		logger.Info("duplicate payment event ignored", "provider", p.Provider, "event_id", p.EventID, "payment_ref", p.PaymentRef)
		return
	}
	c.seenEvents[event] = true
	if p.Outcome == shop.PaymentSucceeded && p.PaymentRef != "" {
		c.seenPaid[ref] = true
	}
	c.applyPayment(ctx, p)
}

// paymentKey is how the saga remembers a payment's event id or ref: with its provider, and
// "\x00" between them, which no provider name holds (api.ParseStandardWebhookSecrets).
func (c *checkout) paymentKey(ctx workflow.Context, provider, id string) string {
	if workflow.GetVersion(ctx, paymentKeysChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return id
	}
	return provider + "\x00" + id
}

// applyPayment decides what a new payment event does to the checkout.
func (c *checkout) applyPayment(ctx workflow.Context, p shop.Payment) {
	logger := workflow.GetLogger(ctx)
	// A cancel request accepted in the same workflow task as an earlier payment does not close
	// it: the payment came first, with the holds in place (see takesPayment).
	open := c.takesPayment()
	switch {
	case p.Outcome != shop.PaymentSucceeded && !open:
		logger.Info("payment event after the checkout was decided ignored", "event_id", p.EventID, "status", c.state)
	case p.Outcome == shop.PaymentFailed:
		c.lastFailure = &p
		if c.state == shop.StatusAwaitingPayment {
			c.waitingDetails(ctx)
		}
	case p.Outcome == shop.PaymentCanceled:
		c.canceledPay = &p
	case !open:
		// Money for a checkout that can no longer take it: give it back.
		c.refund(p, fmt.Sprintf("payment arrived after the checkout was %s", c.state))
		logger.Warn("late payment will be refunded", "event_id", p.EventID, "status", c.state)
	case p.AmountCents != c.view.AmountCents || !strings.EqualFold(p.Currency, c.view.Currency):
		reason := fmt.Sprintf("payment %s of %s does not match the checkout's %s", p.EventID,
			money(p.AmountCents, strings.ToLower(p.Currency)), money(c.view.AmountCents, c.view.Currency))
		c.view.Reason = &reason
		c.flag(ctx)
		c.refund(p, reason)
		if c.state == shop.StatusAwaitingPayment {
			c.waitingDetails(ctx)
		}
		logger.Warn("payment amount mismatch; refunding it", "event_id", p.EventID)
	default:
		c.paid = &p
	}
}

func withSummary(o workflow.ActivityOptions, summary string) workflow.ActivityOptions {
	o.Summary = summary
	return o
}

func withLocalSummary(o workflow.LocalActivityOptions, summary string) workflow.LocalActivityOptions {
	o.Summary = summary
	return o
}

// IsErrorType tells whether err is, or wraps, an application error of type t: one of the
// saga's refusals (shop.ErrType...), as the activities raise them and the update handlers
// answer them.
func IsErrorType(err error, t string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == t
}

// reasonOf is the human reason stored for an end and shown to the buyer. A named refusal
// (a non-retryable application error an activity chose) carries our own message. Anything
// else is an infrastructure failure whose text names hosts, users and drivers: the reason
// says only that the step kept failing, and the full error stays in the saga's history and
// the worker's log.
func reasonOf(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.NonRetryable() && appErr.Type() != "" {
		return appErr.Error()
	}
	if temporal.IsCanceledError(err) {
		return "cancelled"
	}
	return "a step kept failing (timeouts or an unreachable Redis, Postgres or payment provider); the saga's history has the error"
}

// errorText is an error as support reads it (attention, logs): the innermost application
// error's message, raw.
func errorText(err error) string {
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
