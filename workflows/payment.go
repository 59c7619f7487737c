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

// The payment decision: the wait for a payment (awaitPayment), and what each payment event
// does to the checkout (onPayment, applyPayment). Payments reach the saga only through the
// payment channel, taken here at the points where the saga decides; decision.go answers
// whether it has.

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
// They were read from Postgres's verified events, so they are not verified again.
func (c *checkout) applyOrphans(ctx workflow.Context, orphans []shop.RecordedPayment) {
	for _, o := range orphans {
		c.onVerifiedPayment(ctx, shop.Payment{Provider: o.Provider, EventID: o.EventID, Outcome: shop.PaymentKind(o.Outcome),
			PaymentRef: o.PaymentRef, AmountCents: o.AmountCents, Currency: o.Currency})
	}
}

func (c *checkout) waitingDetails(ctx workflow.Context) {
	details := fmt.Sprintf("Waiting for payment of %s until %s", money(c.view.AmountCents, c.view.Currency), c.expiresAt.Format(time.RFC3339))
	if c.lastFailure != nil {
		details += fmt.Sprintf(". Last attempt failed (%s); the buyer may retry", c.lastFailure.EventID)
	}
	if c.flagged && c.unverified != nil {
		details = fmt.Sprintf("NEEDS ATTENTION: ignored a %s payment signal (%s, payment %s) that no verified webhook or reconciliation recorded; only verified money pays (docs/support.md). Acknowledge with the acknowledge action once handled. ",
			c.unverified.Outcome, c.unverified.EventID, c.unverified.PaymentRef) + details
	}
	if c.flagged && c.view.Reason != nil {
		details = "NEEDS ATTENTION: " + *c.view.Reason + ". The payment is being refunded (see refunds); acknowledge with the acknowledge action once handled. " + details
	}
	workflow.SetCurrentDetails(ctx, details)
}

// onPayment applies one payment event signalled to the saga, once a verified event recorded
// it (verified). A signal no verified event recorded is flagged and changes nothing else: the
// saga keeps waiting for verified money until the payment window closes.
func (c *checkout) onPayment(ctx workflow.Context, p shop.Payment) {
	if c.isRepeat(ctx, p) {
		return
	}
	if !c.verified(ctx, p) {
		c.unverified = &p
		c.flag(ctx)
		if c.state == shop.StatusAwaitingPayment && !c.decided() {
			c.waitingDetails(ctx)
		}
		workflow.GetLogger(ctx).Warn("unverified payment signal ignored", "provider", p.Provider, "event_id", p.EventID,
			"payment_ref", p.PaymentRef, "outcome", p.Outcome, "status", c.state)
		return
	}
	c.onVerifiedPayment(ctx, p)
}

// verified reports whether a verified event (a webhook whose signature the API checked, or
// the provider's own listing to reconciliation) recorded p for this checkout. Anyone who
// reaches Temporal can signal a saga. The question must be answered, however long Postgres
// is down: a verified payment is never dropped. Sagas of an older shape that met a payment
// before verifiedPaymentsChange take every event, as they did (their confirm checks the money).
func (c *checkout) verified(ctx workflow.Context, p shop.Payment) bool {
	if c.in.Shape < shapeVerifiedPayments && workflow.GetVersion(ctx, verifiedPaymentsChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return true
	}
	// Disconnected: a payment that came with a workflow cancel is still asked about.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	summary := fmt.Sprintf("Verify %s payment event %s", p.Outcome, p.EventID)
	var ok bool
	err := c.persist(dctx, summary, func(ctx workflow.Context) error {
		lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(mustFinishOptions, summary))
		return workflow.ExecuteLocalActivity(lctx, steps.VerifyPayment, steps.VerifyPaymentInput{
			CheckoutID: c.in.CheckoutID, Payment: p,
		}).Get(ctx, &ok)
	})
	return err == nil && ok
}

// isRepeat reports whether p was already handled: the same provider's event id, or the same
// successful payment seen through another channel.
func (c *checkout) isRepeat(ctx workflow.Context, p shop.Payment) bool {
	event, ref := c.paymentKey(ctx, p.Provider, p.EventID), c.paymentKey(ctx, p.Provider, p.PaymentRef)
	if c.seenEvents[event] || p.Outcome == shop.PaymentSucceeded && p.PaymentRef != "" && c.seenPaid[ref] {
		workflow.GetLogger(ctx).Info("duplicate payment event ignored", "provider", p.Provider, "event_id", p.EventID, "payment_ref", p.PaymentRef)
		return true
	}
	return false
}

// onVerifiedPayment applies one verified payment event. Repeats are ignored.
func (c *checkout) onVerifiedPayment(ctx workflow.Context, p shop.Payment) {
	if c.isRepeat(ctx, p) {
		return
	}
	c.seenEvents[c.paymentKey(ctx, p.Provider, p.EventID)] = true
	if p.Outcome == shop.PaymentSucceeded && p.PaymentRef != "" {
		c.seenPaid[c.paymentKey(ctx, p.Provider, p.PaymentRef)] = true
	}
	c.applyPayment(ctx, p)
}

// paymentKey is how the saga remembers a payment's event id or ref: with its provider, and
// "\x00" between them, which no provider name holds (api.ParseStandardWebhookSecrets).
func (c *checkout) paymentKey(ctx workflow.Context, provider, id string) string {
	if c.in.Shape < shapePaymentKeys && workflow.GetVersion(ctx, paymentKeysChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
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

func money(cents int64, currency string) string {
	return fmt.Sprintf("%d.%02d %s", cents/100, cents%100, strings.ToUpper(currency))
}
