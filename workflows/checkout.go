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
// in decision.go; the payment wait and what each payment does are in payment.go; a step that
// keeps failing waits for support in stuck.go; the query and updates are handled in
// handlers.go, and named with their arguments in messages.go; every workflow.GetVersion change
// id is listed in versions.go. States never move backwards (Status.rank); a late or repeated
// event cannot reopen a finished checkout.
package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
)

// Checkout is the saga of one checkout. Its id is WorkflowID(in.CheckoutID).
func Checkout(ctx workflow.Context, in Input) (shop.View, error) {
	if in.Shape > NewestShape {
		// An API newer than this worker started the saga. Run as an older shape, it would take
		// branches without the markers a worker that knows the shape replays. A panic fails
		// the workflow task, which Temporal retries until a worker that knows the shape takes it.
		panic(fmt.Sprintf("checkout %s is of saga shape %d, newer than this worker's newest shape %d: a newer worker must run it",
			in.CheckoutID, in.Shape, NewestShape))
	}
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
			Caller:         in.Caller,
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
	unverified  *shop.Payment   // the latest payment signal no verified event recorded (ignored)
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
	c.view.ExpiresAt = new(c.expiresAt)
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
	// The view names the request that created the checkout, as recorded: a request is judged
	// against it, never against the one that started this run.
	v := shop.ViewFromRecord(rec)
	// What this run did is kept: the refunds it started, and whether support must look.
	v.Refunds, v.NeedsAttention = c.view.Refunds, v.NeedsAttention || c.view.NeedsAttention
	if c.view.Attention != "" {
		v.Attention = c.view.Attention
	}
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

// record prices the cart and writes the checkout to Postgres.
func (c *checkout) record(ctx workflow.Context) (shop.CheckoutRecord, error) {
	var rec shop.CheckoutRecord
	lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(recordOptions, "Record checkout "+c.in.CheckoutID))
	err := workflow.ExecuteLocalActivity(lctx, steps.RecordCheckout, steps.RecordCheckoutInput{
		CheckoutID: c.in.CheckoutID, CustomerID: c.in.CustomerID, Items: shop.Unpriced(c.in.Items), Creator: c.view.Creator(),
	}).Get(ctx, &rec)
	return rec, err
}

// holdAll reserves every SKU concurrently. Each release is registered before its reserve is
// scheduled. It returns the first refusal (out of stock beats other errors, so the client
// learns about every short SKU).
func (c *checkout) holdAll(ctx workflow.Context) error {
	futures := make([]workflow.Future, len(c.view.Items))
	for i, it := range c.view.Items {
		in := steps.StockInput{CheckoutID: c.in.CheckoutID, SKU: it.SKU, Quantity: it.Quantity}
		c.registerRelease(in)
		lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(reserveOptions, fmt.Sprintf("Hold %d x %s", it.Quantity, it.SKU)))
		futures[i] = workflow.ExecuteLocalActivity(lctx, steps.ReserveStock, in)
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
		return workflow.ExecuteLocalActivity(lctx, steps.ConfirmOrder, steps.ConfirmOrderInput{
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
	if IsErrorType(err, shop.ErrTypePaymentRefunded) {
		// The payment's refund is recorded: an earlier run of this saga judged it late and
		// sent it back before support reset the saga. The money is going back, so it pays for
		// nothing; the holds go back too.
		c.end(ctx, shop.StatusFailed, "the payment "+p.PaymentRef+" is being refunded: it pays for no order")
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
		in := steps.StockInput{CheckoutID: c.in.CheckoutID, SKU: it.SKU, Quantity: it.Quantity}
		summary := fmt.Sprintf("Commit %d x %s", it.Quantity, it.SKU)
		err := c.persist(dctx, summary, func(ctx workflow.Context) error {
			lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(mustFinishOptions, summary))
			return workflow.ExecuteLocalActivity(lctx, steps.CommitStock, in).Get(ctx, nil)
		})
		if err != nil {
			// The order stands (it is in Postgres); a hold that cannot be committed means
			// Redis and Postgres disagree, which support must reconcile.
			c.flag(dctx)
			c.view.Reason = new("commit hold: " + reasonOf(err))
		}
	}
	c.setState(ctx, shop.StatusConfirmed, "")
	workflow.SetCurrentDetails(ctx, "Confirmed as order "+orderID)
}

// end finishes a checkout that was not confirmed: release every hold, last registered first,
// on a disconnected context (so a cancelled workflow still releases), then record the end.
// When Postgres already holds another end (support reset the saga past its confirm, say), the
// run answers that end instead (adoptRecordedEnd).
func (c *checkout) end(ctx workflow.Context, status shop.Status, reason string) {
	c.closing = true
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.SetCurrentDetails(dctx, fmt.Sprintf("Ending as %s: releasing holds", status))
	var w endingWatch
	workflow.Go(dctx, func(ctx workflow.Context) { c.refundWhileEnding(ctx, &w) })
	defer w.stop(dctx)
	var earlier *shop.CheckoutRecord
	recordOutcome := func(ctx workflow.Context) {
		c.undoStep(ctx, "Record outcome "+string(status), steps.RecordOutcome, steps.RecordOutcomeInput{
			CheckoutID: c.in.CheckoutID, Status: string(status), Reason: reason, ExpiresAt: c.view.ExpiresAt,
		}, &earlier)
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
		if earlier != nil && earlier.Status == string(shop.StatusConfirmed) {
			// The order's holds were committed when it was confirmed: none is this run's.
			c.undo.holds = nil
		}
		c.giveBackHolds(dctx, status)
	}
	if earlier != nil && earlier.Status != string(status) {
		c.adoptRecordedEnd(dctx, *earlier, status)
		return
	}
	c.setState(dctx, status, reason)
	workflow.SetCurrentDetails(dctx, fmt.Sprintf("Ended as %s: %s", status, reason))
}

// refundWhileEnding takes the payments that arrive while the ending steps run, until ended:
// the end is chosen, so each is refunded (or ignored) at once. The steps may wait for a long
// time: a store that is down, or a step support paused in the Web UI, which retries nothing
// until it is unpaused. Money is never kept meanwhile. Sagas that met such a payment before
// this change took it only once the end was recorded: they replay that, and only sagas that
// meet one carry the marker.
func (c *checkout) refundWhileEnding(ctx workflow.Context, w *endingWatch) {
	for {
		_ = workflow.Await(ctx, func() bool { return w.ended || c.payments.Len() > 0 })
		if w.ended || workflow.GetVersion(ctx, refundWhileEndingChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			return
		}
		w.busy = true
		c.drainPayments(ctx)
		w.busy = false
	}
}

// endingWatch is refundWhileEnding's state: ended once the ending steps are done; busy while
// it handles a payment, which the saga lets finish before it goes on (and closes).
type endingWatch struct{ ended, busy bool }

func (w *endingWatch) stop(ctx workflow.Context) {
	w.ended = true
	_ = workflow.Await(ctx, func() bool { return !w.busy })
}

// adoptRecordedEnd answers the end Postgres recorded before this run chose another: the run
// began before that end (support reset the saga to a point before its confirm, and the new
// run never saw the payment), and an end is final, forever.
func (c *checkout) adoptRecordedEnd(ctx workflow.Context, rec shop.CheckoutRecord, chose shop.Status) {
	workflow.GetLogger(ctx).Warn("the run chose another end than the one recorded; answering the recorded end",
		"chose", chose, "recorded", rec.Status, "order_id", rec.OrderID)
	rec.Payments = nil // payments of this run are its own to handle (refunds after the end)
	c.adoptEnded(ctx, rec)
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

func (c *checkout) upsert(ctx workflow.Context, updates ...temporal.SearchAttributeUpdate) {
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}
