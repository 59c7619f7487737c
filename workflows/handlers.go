package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/shop"
)

// MaxHold bounds how long a checkout may hold stock in all, extensions included: held units
// are units no other buyer can have, and two days is beyond any real payment.
const MaxHold = 48 * time.Hour

// registerHandlers installs the saga's query and updates. Every update that changes the
// checkout has a validator, so a bad request is refused before it enters the history. The
// payment signal has no handler: the main coroutine receives it (see checkout.payments).
func (c *checkout) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (shop.View, error) { return c.view, nil }); err != nil {
		return fmt.Errorf("register status query: %w", err)
	}
	handlers := []struct {
		name    string
		handler any
		opts    workflow.UpdateHandlerOptions
	}{
		{UpdateReservation, c.reservation, workflow.UpdateHandlerOptions{Validator: c.validateReservation}},
		{UpdateCancel, c.cancel, workflow.UpdateHandlerOptions{Validator: c.validateCancel}},
		{UpdateExtend, c.extend, workflow.UpdateHandlerOptions{Validator: c.validateExtend}},
		{UpdateRetry, c.retry, workflow.UpdateHandlerOptions{Validator: c.validateRetry}},
		{UpdateAcknowledge, c.acknowledge, workflow.UpdateHandlerOptions{Validator: c.validateAcknowledge}},
	}
	for _, h := range handlers {
		if err := workflow.SetUpdateHandlerWithOptions(ctx, h.name, h.handler, h.opts); err != nil {
			return fmt.Errorf("register %s update: %w", h.name, err)
		}
	}
	return nil
}

// reservation answers once the checkout holds every SKU or was refused.
func (c *checkout) reservation(ctx workflow.Context, req ReservationRequest) (ReservationResult, error) {
	if err := workflow.Await(ctx, func() bool { return c.state != shop.StatusReserving }); err != nil {
		return ReservationResult{}, err
	}
	// The fingerprint is the creator's: this run's input, or for an adopted end the record's.
	return ReservationResult{
		View: c.view, Created: !c.adopted && req.RequestID != "" && req.RequestID == c.in.RequestID,
		RequestHash: c.view.RequestHash, IdempotencyKey: c.view.IdempotencyKey, Caller: c.view.Caller,
		RejectCode: c.rejectCode,
	}, nil
}

// validateReservation refuses a request for this cart with another body before it enters the
// history. Temporal takes a workflow's updates up to a total (history.maxTotalUpdates, 2,000
// by default), refused ones not counted: anyone posting the cart id with other contents under
// fresh keys would otherwise spend them, and with them the buyer's cancel and support's
// actions. A request that names no body (from an API older than the field) is taken, as before.
func (c *checkout) validateReservation(ctx workflow.Context, req ReservationRequest) error {
	// The creator is the view's: this run's input, or the recorded end's it adopted. Sagas
	// and APIs older than callers name none; they are judged by the body alone.
	creator := c.view.Creator()
	if req.Caller != "" && creator.Caller != "" && req.Caller != creator.Caller {
		return temporal.NewApplicationError("the cart is another caller's checkout", shop.ErrTypeCheckoutExists)
	}
	if req.RequestHash == "" || creator.RequestHash == "" || req.RequestHash == creator.RequestHash {
		return nil
	}
	if req.IdempotencyKey != "" && req.IdempotencyKey == creator.IdempotencyKey {
		return temporal.NewApplicationError("the Idempotency-Key was used with another request body", shop.ErrTypeIdempotencyKeyReused)
	}
	return temporal.NewApplicationError("the cart is already checking out with other contents", shop.ErrTypeCheckoutExists)
}

func (c *checkout) validateCancel(ctx workflow.Context, req CancelRequest) error {
	if c.paidFor() {
		return temporal.NewApplicationError("checkout is already paid and cannot be cancelled", shop.ErrTypeAlreadyPaid)
	}
	if req.By != "customer" && req.By != "support" {
		return fmt.Errorf("cancel: by must be customer or support, not %q", req.By)
	}
	return nil
}

// cancel ends an open checkout; it answers with the final view. Cancelling a checkout that
// already ended otherwise is harmless and answers with that end.
func (c *checkout) cancel(ctx workflow.Context, req CancelRequest) (shop.View, error) {
	if c.takesCancel() {
		c.cancelBy = req.By
		c.wake.SendAsync(struct{}{})
	}
	if err := workflow.Await(ctx, func() bool { return c.state.Final() }); err != nil {
		return shop.View{}, err
	}
	return c.view, nil
}

func (c *checkout) validateExtend(ctx workflow.Context, req ExtendRequest) error {
	if !c.extendable() {
		return temporal.NewApplicationError(fmt.Sprintf("only a checkout awaiting payment can be extended; this one is %s", c.state), shop.ErrTypeNotExtendable)
	}
	if req.Seconds < 1 || req.Seconds > MaxPaymentTimeoutSeconds {
		return temporal.NewApplicationError(fmt.Sprintf("seconds must be between 1 and %d", MaxPaymentTimeoutSeconds), shop.ErrTypeInvalidSupportRequest)
	}
	if until := c.expiresAt.Add(time.Duration(req.Seconds) * time.Second); until.Sub(c.holdStarted) > MaxHold {
		return temporal.NewApplicationError(fmt.Sprintf("a hold may last at most %s in all; this one may be extended until %s",
			MaxHold, c.holdStarted.Add(MaxHold).Format(time.RFC3339)), shop.ErrTypeInvalidSupportRequest)
	}
	return nil
}

// extend moves the payment deadline later; the payment timer restarts with the new deadline.
func (c *checkout) extend(ctx workflow.Context, req ExtendRequest) (shop.View, error) {
	c.expiresAt = c.expiresAt.Add(time.Duration(req.Seconds) * time.Second)
	c.view.ExpiresAt = new(c.expiresAt)
	c.extended = true
	c.wake.SendAsync(struct{}{})
	c.upsert(ctx, AttrHoldExpiresAt.ValueSet(c.expiresAt))
	workflow.GetLogger(ctx).Info("hold extended", "expires_at", c.expiresAt)
	return c.view, nil
}

func (c *checkout) validateRetry(ctx workflow.Context, req RetryRequest) error {
	if c.stuck == "" {
		return temporal.NewApplicationError("no step of this checkout is waiting to be retried", shop.ErrTypeNothingToRetry)
	}
	return nil
}

// retry wakes a stuck step at once instead of at its next automatic attempt.
func (c *checkout) retry(ctx workflow.Context, req RetryRequest) (shop.View, error) {
	c.retryRequested = true
	return c.view, nil
}

func (c *checkout) validateAcknowledge(ctx workflow.Context, req AcknowledgeRequest) error {
	if !c.flagged {
		return temporal.NewApplicationError("the checkout is not flagged (a stuck step clears itself when it succeeds)", shop.ErrTypeNothingToRetry)
	}
	return nil
}

// acknowledge clears a flag support has dealt with (a wrong payment whose refund went
// through, say). A stuck step keeps the checkout flagged until it succeeds.
func (c *checkout) acknowledge(ctx workflow.Context, req AcknowledgeRequest) (shop.View, error) {
	c.flagged = false
	c.refreshAttention(ctx)
	if c.state == shop.StatusAwaitingPayment {
		c.waitingDetails(ctx)
	}
	return c.view, nil
}
