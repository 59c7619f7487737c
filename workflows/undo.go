package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
)

// The undo stack: everything a checkout gives back when it does not end confirmed.
//
//   - Holds: each SKU's release is registered before its reserve is scheduled (holdAll). A
//     reserve can succeed in Redis and still look failed to the workflow (a timeout after the
//     script ran); releasing a hold that was never taken is a harmless no-op that also
//     refuses any late reserve. They are released (or forfeited, see confirm) by end.
//   - Money: a payment the checkout cannot keep (after the end, a second one, a wrong amount
//     or currency) is queued by refund and given back by a Refund workflow (startRefunds).

// undo is the saga's undo stack.
type undo struct {
	// holds are the stock holds registered so far, in registration order.
	holds []steps.StockInput
	// refunds are payments the checkout cannot keep; startRefunds starts one Refund each.
	refunds        []refundOrder
	refundsStarted int
}

type refundOrder struct {
	payment shop.Payment
	reason  string
}

// registerRelease puts a hold's release on the stack, before the hold is asked for.
func (c *checkout) registerRelease(in steps.StockInput) {
	c.undo.holds = append(c.undo.holds, in)
}

// giveBackHolds releases (or forfeits) every registered hold. Sagas started before
// endStepsChange run them one after the other, last registered first; newer ones all at once.
func (c *checkout) giveBackHolds(ctx workflow.Context, reason shop.Status) {
	holds := c.undo.holds
	c.undo.holds = nil
	if c.endVersion == workflow.DefaultVersion {
		for i := len(holds) - 1; i >= 0; i-- {
			c.giveBackHold(ctx, holds[i], reason)
		}
		return
	}
	wg := workflow.NewWaitGroup(ctx)
	for _, in := range holds {
		wg.Add(1)
		workflow.Go(ctx, func(ctx workflow.Context) {
			defer wg.Done()
			c.giveBackHold(ctx, in, reason)
		})
	}
	wg.Wait(ctx)
}

// giveBackHold ends one hold: released, so its units are for sale again, or forfeited when
// Postgres could not record the sale (older sagas only release).
func (c *checkout) giveBackHold(ctx workflow.Context, in steps.StockInput, reason shop.Status) {
	in.Reason = string(reason)
	if c.forfeit && c.endVersion != workflow.DefaultVersion {
		c.undoStep(ctx, fmt.Sprintf("Forfeit %d x %s (%s)", in.Quantity, in.SKU, reason), steps.ForfeitStock, in, nil)
		return
	}
	c.undoStep(ctx, fmt.Sprintf("Release %d x %s (%s)", in.Quantity, in.SKU, reason), steps.ReleaseStock, in, nil)
}

// undoStep runs one step of ending a checkout (see endOptions) until it succeeds, and decodes
// its result into result unless result is nil. These
// steps are regular activities, not local ones: the server runs an activity only for the
// workflow task it accepted, so a worker whose task already timed out (stalled, paused,
// cut off from the server) can never release holds that the live run, now on another
// worker, still owns, nor record an end that run did not choose.
func (c *checkout) undoStep(ctx workflow.Context, summary, step string, arg, result any) {
	err := c.persist(ctx, summary, func(ctx workflow.Context) error {
		if c.endVersion == workflow.DefaultVersion { // a saga started before endStepsChange
			lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(undoOptions, summary))
			return workflow.ExecuteLocalActivity(lctx, step, arg).Get(ctx, result)
		}
		actx := workflow.WithActivityOptions(ctx, withSummary(endOptions, summary))
		return workflow.ExecuteActivity(actx, step, arg).Get(ctx, result)
	})
	if err != nil {
		// Only a named non-retryable error gets here (a release after commit, say): the
		// hold is not ours to release, which support must look at.
		c.flag(ctx)
		workflow.GetLogger(ctx).Error("compensation refused", "step", summary, "error", err)
	}
}

// refund queues a payment for a Refund workflow (see startRefunds).
func (c *checkout) refund(p shop.Payment, reason string) {
	c.undo.refunds = append(c.undo.refunds, refundOrder{payment: p, reason: reason})
}

// refundsPending reports whether a queued refund has not started yet.
func (c *checkout) refundsPending() bool { return c.undo.refundsStarted < len(c.undo.refunds) }

// startRefunds starts one Refund child workflow per queued payment. The child is abandoned
// when the checkout closes: a refund outlives the saga that ordered it. Its id is derived
// from the payment, so a payment is never refunded by two workflows.
func (c *checkout) startRefunds(ctx workflow.Context) {
	for {
		if err := workflow.Await(ctx, c.refundsPending); err != nil {
			ctx, _ = workflow.NewDisconnectedContext(ctx) // keep starting refunds after a cancel
			continue
		}
		// Await answers a condition that holds before it looks at the cancellation.
		if ctx.Err() != nil && workflow.GetVersion(ctx, refundsChange, workflow.DefaultVersion, 1) == 1 {
			ctx, _ = workflow.NewDisconnectedContext(ctx)
		}
		order := c.undo.refunds[c.undo.refundsStarted]
		in := RefundOf(c.in.CheckoutID, c.in.CustomerID, order.payment, order.reason)
		err := startRefund(ctx, in, fmt.Sprintf("Refund %s of checkout %s", money(in.AmountCents, in.Currency), in.CheckoutID))
		if err != nil {
			workflow.GetLogger(ctx).Error("start refund", "payment_ref", in.PaymentRef, "error", err)
			c.flag(ctx)
		}
		c.view.Refunds = append(c.view.Refunds, RefundWorkflowID(in.Provider, in.PaymentRef))
		c.undo.refundsStarted++
	}
}
