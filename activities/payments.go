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
	"github.com/checkout-saga/checkout-saga/store"
)

// RefundPaymentInput asks for one refund.
type RefundPaymentInput struct {
	Provider       string `json:"provider"`
	PaymentRef     string `json:"payment_ref"`
	AmountCents    int64  `json:"amount_cents"`
	Currency       string `json:"currency"`
	IdempotencyKey string `json:"idempotency_key"`
	Reason         string `json:"reason"`
}

// RefundResult is the provider's answer.
type RefundResult struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

func (a *Activities) provider(name string) (payments.Provider, error) {
	if p, ok := a.Payments[name]; ok {
		return p, nil
	}
	return nil, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("no payment provider %q is configured (set STRIPE_API_KEY for stripe)", name), shop.ErrTypeNoPaymentProvider, nil)
}

// RefundPayment refunds a payment through its provider. The idempotency key makes a retry
// return the first refund; a refusal for good is a non-retryable RefundRefused.
func (a *Activities) RefundPayment(ctx context.Context, in RefundPaymentInput) (RefundResult, error) {
	p, err := a.provider(in.Provider)
	if err != nil {
		return RefundResult{}, err
	}
	// Only verified money is given back: a payment signal sent to Temporal from outside could
	// name another buyer's payment.
	verified, err := a.Store.PaymentVerified(ctx, in.Provider, in.PaymentRef, "", in.AmountCents, in.Currency)
	if err != nil {
		return RefundResult{}, err
	}
	if !verified {
		metrics.UnverifiedPayments.Inc()
		return RefundResult{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"no verified event recorded %s payment %s of at least %d %s: not refunding it", in.Provider, in.PaymentRef, in.AmountCents, in.Currency),
			shop.ErrTypeRefundRefused, nil)
	}
	r, err := p.Refund(ctx, payments.RefundRequest{
		PaymentRef: in.PaymentRef, AmountCents: in.AmountCents, Currency: in.Currency,
		IdempotencyKey: in.IdempotencyKey, Reason: in.Reason,
	})
	switch {
	case errors.Is(err, payments.ErrRefundRefused), errors.Is(err, payments.ErrInvalidRequest):
		return RefundResult{}, temporal.NewNonRetryableApplicationError(err.Error(), shop.ErrTypeRefundRefused, nil)
	case err != nil:
		return RefundResult{}, fmt.Errorf("refund payment %s: %w", in.PaymentRef, err)
	case r.Status == payments.RefundFailed || r.Status == payments.RefundCanceled:
		return RefundResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("refund %s of payment %s ended %s at the provider", r.ID, in.PaymentRef, r.Status), shop.ErrTypeRefundRefused, nil)
	}
	activity.GetLogger(ctx).Info("payment refunded", "payment_ref", in.PaymentRef, "refund_id", r.ID, "status", r.Status)
	return RefundResult{ID: r.ID, Status: r.Status}, nil
}

// VerifyPaymentInput names a payment event a checkout's saga was signalled.
type VerifyPaymentInput struct {
	CheckoutID string       `json:"checkout_id"`
	Payment    shop.Payment `json:"payment"`
}

// VerifyPayment reports whether a verified event recorded the signalled payment event for the
// checkout: its outcome, payment, amount and currency. The webhook handler and reconciliation
// record every event before they signal it, so a signal it cannot find came from elsewhere
// (the Temporal Web UI, the CLI, any Temporal client): counted, and ignored by the saga.
func (a *Activities) VerifyPayment(ctx context.Context, in VerifyPaymentInput) (bool, error) {
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

// RecordRefundInput is a refund's state for Postgres.
type RecordRefundInput struct {
	ID               string `json:"id"`
	CheckoutID       string `json:"checkout_id"`
	Provider         string `json:"provider"`
	PaymentRef       string `json:"payment_ref"`
	AmountCents      int64  `json:"amount_cents"`
	Currency         string `json:"currency"`
	Reason           string `json:"reason"`
	Status           string `json:"status"`
	ProviderRefundID string `json:"provider_refund_id"`
}

// RecordRefund writes a refund's current state (one row per refund, keyed by its idempotency key).
func (a *Activities) RecordRefund(ctx context.Context, in RecordRefundInput) error {
	return a.Store.RecordRefund(ctx, store.Refund(in))
}

// FindPaymentInput names a checkout to ask a provider about.
type FindPaymentInput struct {
	Provider   string `json:"provider"`
	CheckoutID string `json:"checkout_id"`
}

// FoundPayment is a succeeded payment the provider knows of.
type FoundPayment struct {
	Ref         string `json:"ref"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// FindSucceededPayment asks the provider whether the checkout was paid (for missed webhooks)
// and answers the first payment it found. Kept for ReconcilePayments runs recorded before
// reconcile-every-payment; newer runs call FindSucceededPayments.
func (a *Activities) FindSucceededPayment(ctx context.Context, in FindPaymentInput) (*FoundPayment, error) {
	found, err := a.FindSucceededPayments(ctx, in)
	if err != nil || len(found) == 0 {
		return nil, err
	}
	return &found[0], nil
}

// FindSucceededPayments asks the provider for every succeeded payment of the checkout (for
// missed webhooks): the saga keeps the one of the right amount and refunds the others.
func (a *Activities) FindSucceededPayments(ctx context.Context, in FindPaymentInput) ([]FoundPayment, error) {
	p, err := a.provider(in.Provider)
	if err != nil {
		return nil, err
	}
	found, err := p.FindSucceeded(ctx, in.CheckoutID)
	if err != nil {
		return nil, err
	}
	out := make([]FoundPayment, len(found))
	for i, f := range found {
		out[i] = FoundPayment{Ref: f.Ref, AmountCents: f.AmountCents, Currency: f.Currency}
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

// PaymentFatesInput names payments a provider lists for one checkout.
type PaymentFatesInput struct {
	Provider   string   `json:"provider"`
	CheckoutID string   `json:"checkout_id"`
	Refs       []string `json:"refs"`
}

// ReadPaymentFates reads which of the payments Postgres has already given an end
// (shop.PaymentFates): reconciliation never hands the checkout a payment being refunded, nor
// refunds the payment of an order.
func (a *Activities) ReadPaymentFates(ctx context.Context, in PaymentFatesInput) (shop.PaymentFates, error) {
	return a.Store.PaymentFates(ctx, in.Provider, in.CheckoutID, in.Refs)
}

// ListWorkflowsInput is a visibility query.
type ListWorkflowsInput struct {
	Query string `json:"query"`
	Limit int    `json:"limit"`
}

// ListWorkflowPageInput asks for one page of a visibility query: the first when PageToken
// is empty, else the one after the page that returned it.
type ListWorkflowPageInput struct {
	Query     string `json:"query"`
	PageSize  int    `json:"page_size"`
	PageToken []byte `json:"page_token,omitempty"`
}

// WorkflowPage is one page of matching workflow ids; NextPageToken is empty on the last.
type WorkflowPage struct {
	IDs           []string `json:"ids"`
	NextPageToken []byte   `json:"next_page_token,omitempty"`
}

// ListWorkflowPage runs one page of a visibility query.
func (a *Activities) ListWorkflowPage(ctx context.Context, in ListWorkflowPageInput) (WorkflowPage, error) {
	resp, err := a.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: in.Query, PageSize: int32(in.PageSize), NextPageToken: in.PageToken,
	})
	if err != nil {
		return WorkflowPage{}, fmt.Errorf("list workflows: %w", err)
	}
	page := WorkflowPage{NextPageToken: resp.GetNextPageToken()}
	for _, e := range resp.GetExecutions() {
		page.IDs = append(page.IDs, e.GetExecution().GetWorkflowId())
	}
	return page, nil
}

// ListWorkflowIDs runs a visibility query and returns the matching workflow ids, at most Limit.
// Kept for ReconcilePayments runs recorded before reconcile-pages; newer runs page with
// ListWorkflowPage.
func (a *Activities) ListWorkflowIDs(ctx context.Context, in ListWorkflowsInput) ([]string, error) {
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

// ClaimStaleOrphansInput bounds one sweep of orphan payments.
type ClaimStaleOrphansInput struct {
	// OlderThanSeconds: orphans acknowledged at least this long ago. A checkout recorded
	// since claims its own orphans (Store.InsertCheckout), so only a payment whose checkout
	// never came is left by then.
	OlderThanSeconds int64 `json:"older_than_seconds"`
	Limit            int   `json:"limit"`
}

// ClaimStaleOrphans marks successful orphan payments that no checkout claimed in time as
// being refunded (disposition orphan_refund) and returns them. The claim and a checkout's
// own claim (queueMatchOrphans) update the same row, so Postgres lets exactly one of them have
// it: a payment is either refunded or kept by its checkout, never both.
func (a *Activities) ClaimStaleOrphans(ctx context.Context, in ClaimStaleOrphansInput) ([]shop.StaleOrphan, error) {
	claimed, err := a.Store.ClaimStaleOrphans(ctx, in.OlderThanSeconds, in.Limit)
	if err != nil {
		return nil, err
	}
	if len(claimed) > 0 {
		activity.GetLogger(ctx).Warn("orphan payments no checkout claimed will be refunded", "count", len(claimed))
	}
	return claimed, nil
}
