package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
)

func (a *Activities) provider(name string) (payments.Provider, error) {
	if p, ok := a.Payments[name]; ok {
		return p, nil
	}
	return nil, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("no payment provider %q is configured (set STRIPE_API_KEY for stripe)", name), shop.ErrTypeNoPaymentProvider, nil)
}

// RefundPayment refunds a payment through its provider. The idempotency key makes a retry
// return the first refund; a refusal for good is a non-retryable RefundRefused.
func (a *Activities) RefundPayment(ctx context.Context, in steps.RefundPaymentInput) (steps.RefundResult, error) {
	p, err := a.provider(in.Provider)
	if err != nil {
		return steps.RefundResult{}, err
	}
	// Only verified money is given back: a payment signal sent to Temporal from outside could
	// name another buyer's payment.
	verified, err := a.Store.PaymentVerified(ctx, in.Provider, in.PaymentRef, "", in.AmountCents, in.Currency)
	if err != nil {
		return steps.RefundResult{}, err
	}
	if !verified {
		metrics.UnverifiedPayments.Inc()
		return steps.RefundResult{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"no verified event recorded %s payment %s of at least %d %s: not refunding it", in.Provider, in.PaymentRef, in.AmountCents, in.Currency),
			shop.ErrTypeRefundRefused, nil)
	}
	r, err := p.Refund(ctx, payments.RefundRequest{
		PaymentRef: in.PaymentRef, AmountCents: in.AmountCents, Currency: in.Currency,
		IdempotencyKey: in.IdempotencyKey, Reason: in.Reason,
	})
	switch {
	case errors.Is(err, payments.ErrRefundRefused), errors.Is(err, payments.ErrInvalidRequest):
		return steps.RefundResult{}, temporal.NewNonRetryableApplicationError(err.Error(), shop.ErrTypeRefundRefused, nil)
	case err != nil:
		return steps.RefundResult{}, fmt.Errorf("refund payment %s: %w", in.PaymentRef, err)
	case r.Status == payments.RefundFailed || r.Status == payments.RefundCanceled:
		return steps.RefundResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("refund %s of payment %s ended %s at the provider", r.ID, in.PaymentRef, r.Status), shop.ErrTypeRefundRefused, nil)
	}
	activity.GetLogger(ctx).Info("payment refunded", "payment_ref", in.PaymentRef, "refund_id", r.ID, "status", r.Status)
	return steps.RefundResult{ID: r.ID, Status: r.Status}, nil
}

// VerifyPayment reports whether a verified event recorded the signalled payment event for the
// checkout: its outcome, payment, amount and currency. The webhook handler and reconciliation
// record every event before they signal it, so a signal it cannot find came from elsewhere
// (the Temporal Web UI, the CLI, any Temporal client): counted, and ignored by the saga.
func (a *Activities) VerifyPayment(ctx context.Context, in steps.VerifyPaymentInput) (bool, error) {
	p := in.Payment
	ok, err := a.Store.PaymentOutcomeVerified(ctx, p.Provider, p.PaymentRef, in.CheckoutID, p.Outcome, p.AmountCents, p.Currency)
	if err != nil {
		return false, fmt.Errorf("verify %s payment event %s of checkout %s: %w", p.Provider, p.EventID, in.CheckoutID, err)
	}
	if !ok {
		metrics.UnverifiedPayments.Inc()
		activity.GetLogger(ctx).Warn("payment signal no verified event recorded", "checkout_id", in.CheckoutID,
			"provider", p.Provider, "event_id", p.EventID, "payment_ref", p.PaymentRef, "outcome", p.Outcome)
	}
	return ok, nil
}

// RecordRefund writes a refund's current state (one row per refund, keyed by its idempotency key).
// A payment that paid an order is not refunded: shop.ErrTypePaymentKept, not retried.
func (a *Activities) RecordRefund(ctx context.Context, in steps.RecordRefundInput) error {
	err := a.Store.RecordRefund(ctx, store.Refund(in))
	if errors.Is(err, store.ErrPaymentKept) {
		return temporal.NewNonRetryableApplicationError(err.Error(), shop.ErrTypePaymentKept, nil)
	}
	return err
}

// FindSucceededPayment asks the provider whether the checkout was paid (for missed webhooks)
// and answers the first payment it found. Kept for ReconcilePayments runs recorded before
// reconcile-every-payment; newer runs call FindSucceededPayments.
func (a *Activities) FindSucceededPayment(ctx context.Context, in steps.FindPaymentInput) (*steps.FoundPayment, error) {
	found, err := a.FindSucceededPayments(ctx, in)
	if err != nil || len(found) == 0 {
		return nil, err
	}
	return &found[0], nil
}

// FindSucceededPayments asks the provider for every succeeded payment of the checkout (for
// missed webhooks): the saga keeps the one of the right amount and refunds the others.
func (a *Activities) FindSucceededPayments(ctx context.Context, in steps.FindPaymentInput) ([]steps.FoundPayment, error) {
	p, err := a.provider(in.Provider)
	if err != nil {
		return nil, err
	}
	found, err := p.FindSucceeded(ctx, in.CheckoutID)
	if err != nil {
		return nil, err
	}
	out := make([]steps.FoundPayment, len(found))
	for i, f := range found {
		out[i] = steps.FoundPayment{Ref: f.Ref, AmountCents: f.AmountCents, Currency: f.Currency}
		// The provider's own answer, over its authenticated API, is verified money: record it
		// as the webhook would have, under the event id the saga sees ("reconcile-" + ref).
		if _, err := a.Store.RecordPaymentEvent(ctx, shop.PaymentEvent{Provider: in.Provider, EventID: "reconcile-" + f.Ref,
			Type: "reconciled", CheckoutID: in.CheckoutID, PaymentRef: f.Ref, AmountCents: f.AmountCents, Currency: f.Currency,
			Outcome: string(shop.PaymentSucceeded), Payload: []byte("{}")}); err != nil {
			return nil, err
		}
		if err := a.Store.MarkPaymentEventDelivered(ctx, in.Provider, "reconcile-"+f.Ref, shop.DispositionSignalled); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReadPaymentFates reads which of the payments Postgres has already given an end
// (shop.PaymentFates): reconciliation never hands the checkout a payment being refunded, nor
// refunds the payment of an order.
func (a *Activities) ReadPaymentFates(ctx context.Context, in steps.PaymentFatesInput) (shop.PaymentFates, error) {
	return a.Store.PaymentFates(ctx, in.Provider, in.CheckoutID, in.Refs)
}

// ListWorkflowPage runs one page of a visibility query.
func (a *Activities) ListWorkflowPage(ctx context.Context, in steps.ListWorkflowPageInput) (steps.WorkflowPage, error) {
	resp, err := a.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: in.Query, PageSize: int32(in.PageSize), NextPageToken: in.PageToken,
	})
	if err != nil {
		return steps.WorkflowPage{}, fmt.Errorf("list workflows: %w", err)
	}
	page := steps.WorkflowPage{NextPageToken: resp.GetNextPageToken()}
	for _, e := range resp.GetExecutions() {
		page.IDs = append(page.IDs, e.GetExecution().GetWorkflowId())
	}
	return page, nil
}

// ListWorkflowIDs runs a visibility query and returns the matching workflow ids, at most Limit.
// Kept for ReconcilePayments runs recorded before reconcile-pages; newer runs page with
// ListWorkflowPage.
func (a *Activities) ListWorkflowIDs(ctx context.Context, in steps.ListWorkflowsInput) ([]string, error) {
	var ids []string
	var token []byte
	for len(ids) < in.Limit {
		resp, err := a.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: in.Query, PageSize: int32(min(in.Limit-len(ids), 1000)), NextPageToken: token,
		})
		if err != nil {
			return nil, fmt.Errorf("list workflows: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			ids = append(ids, e.GetExecution().GetWorkflowId())
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	return ids, nil
}

// ClaimStaleOrphans marks successful orphan payments that no checkout claimed in time as
// being refunded (disposition orphan_refund) and returns them. The claim and a checkout's
// own claim (queueMatchOrphans) update the same row, so Postgres lets exactly one of them have
// it: a payment is either refunded or kept by its checkout, never both.
func (a *Activities) ClaimStaleOrphans(ctx context.Context, in steps.ClaimStaleOrphansInput) ([]shop.StaleOrphan, error) {
	claimed, err := a.Store.ClaimStaleOrphans(ctx, in.OlderThanSeconds, in.Limit)
	if err != nil {
		return nil, err
	}
	if len(claimed) > 0 {
		activity.GetLogger(ctx).Warn("orphan payments no checkout claimed will be refunded", "count", len(claimed))
	}
	return claimed, nil
}
