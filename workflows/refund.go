package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/activities"
)

// RefundInput is a payment the product must give back.
type RefundInput struct {
	CheckoutID  string `json:"checkout_id"`
	CustomerID  string `json:"customer_id"`
	Provider    string `json:"provider"`
	PaymentRef  string `json:"payment_ref"`
	EventID     string `json:"event_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
	Reason      string `json:"reason"`
}

// RefundView is a refund as support sees it (the refund's status query).
type RefundView struct {
	RefundInput
	Status           string `json:"status"` // requested, refunded, stuck
	ProviderRefundID string `json:"provider_refund_id,omitempty"`
	Attention        string `json:"attention,omitempty"`
}

// Refund statuses.
const (
	RefundRequested = "requested"
	RefundRefunded  = "refunded"
	RefundStuck     = "stuck"
)

// RefundWorkflowID is the id of the refund of one payment: one refund workflow per payment,
// whoever asks for it (the saga for a late payment, the webhook handler once the saga closed).
func RefundWorkflowID(provider, paymentRef string) string {
	return "refund-" + provider + "-" + paymentRef
}

// RefundIdempotencyKey is sent to the provider with the refund: derived from the checkout
// and the payment, so no retry, replay or second workflow can refund the payment twice.
func RefundIdempotencyKey(in RefundInput) string {
	return "refund-" + in.CheckoutID + "-" + in.PaymentRef
}

// RefundAttributes lets support find a refund by customer and amount, and stuck ones by
// NeedsAttention. CheckoutState is left unset: refunds are not checkouts.
func RefundAttributes(in RefundInput) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		AttrCustomerID.ValueSet(in.CustomerID),
		AttrAmountCents.ValueSet(in.AmountCents),
		AttrNeedsAttention.ValueSet(false),
	)
}

// refundOptions: a refund call to the provider. Ten attempts, about two minutes, ride out a
// provider blip; then the refund is stuck and flagged, and tried again every
// stuckRetryInterval or at once on support's retry update. It is never dropped.
var refundOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    30 * time.Second,
		MaximumAttempts:    10,
	},
}

// Refund gives one payment back through its provider and records it in Postgres. A refund
// the provider refuses for good (a disputed charge, say) waits for support: they refund by
// hand in the provider's dashboard, or fix the cause, and send the retry update.
func Refund(ctx workflow.Context, in RefundInput) (RefundView, error) {
	v := RefundView{RefundInput: in, Status: RefundRequested}
	retry := false
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (RefundView, error) { return v, nil }); err != nil {
		return v, fmt.Errorf("register status query: %w", err)
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateRetry,
		func(ctx workflow.Context, _ RetryRequest) (RefundView, error) { retry = true; return v, nil },
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, _ RetryRequest) error {
			if v.Status != RefundStuck {
				return temporal.NewApplicationError("the refund is not waiting to be retried", ErrTypeNothingToRetry)
			}
			return nil
		}})
	if err != nil {
		return v, fmt.Errorf("register retry update: %w", err)
	}
	record := func(status string) {
		lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(undoOptions, "Record refund "+status))
		err := workflow.ExecuteLocalActivity(lctx, acts.RecordRefund, activities.RecordRefundInput{
			ID: RefundIdempotencyKey(in), CheckoutID: in.CheckoutID, Provider: in.Provider, PaymentRef: in.PaymentRef,
			AmountCents: in.AmountCents, Currency: in.Currency, Reason: in.Reason, Status: status,
			ProviderRefundID: v.ProviderRefundID,
		}).Get(ctx, nil)
		if err != nil {
			workflow.GetLogger(ctx).Error("record refund", "status", status, "error", err)
		}
	}
	record(RefundRequested)

	summary := fmt.Sprintf("Refund %s of payment %s (checkout %s)", money(in.AmountCents, in.Currency), in.PaymentRef, in.CheckoutID)
	// key is the idempotency key of the current request. It changes only after the provider
	// refused for good and support asked again: the provider keeps answering a key with its
	// first answer (Stripe for 24 hours), and a definite refusal means no refund was made
	// under the old key, so a new key cannot refund twice. After an unknown outcome (a
	// timeout, a 5xx) the key stays the same.
	key, refusals := RefundIdempotencyKey(in), 0
	for {
		workflow.SetCurrentDetails(ctx, summary+": "+in.Reason)
		var res activities.RefundResult
		actx := workflow.WithActivityOptions(ctx, withSummary(refundOptions, summary))
		err := workflow.ExecuteActivity(actx, acts.RefundPayment, activities.RefundPaymentInput{
			Provider: in.Provider, PaymentRef: in.PaymentRef, AmountCents: in.AmountCents, Currency: in.Currency,
			IdempotencyKey: key, Reason: in.Reason,
		}).Get(ctx, &res)
		if err == nil {
			v.Status, v.ProviderRefundID, v.Attention = RefundRefunded, res.ID, ""
			_ = workflow.UpsertTypedSearchAttributes(ctx, AttrNeedsAttention.ValueSet(false))
			record(RefundRefunded)
			workflow.SetCurrentDetails(ctx, "Refunded: "+summary)
			return v, nil
		}
		var appErr *temporal.ApplicationError
		refused := errors.As(err, &appErr) && appErr.NonRetryable()
		v.Status = RefundStuck
		v.Attention = fmt.Sprintf("%s keeps failing: %s. Fix the cause and send the retry update, or refund by hand in the provider's dashboard and then retry (the provider answers an already-refunded payment as done).",
			summary, errorText(err))
		_ = workflow.UpsertTypedSearchAttributes(ctx, AttrNeedsAttention.ValueSet(true))
		record(RefundStuck)
		workflow.SetCurrentDetails(ctx, "NEEDS ATTENTION: "+v.Attention)
		if refused { // a definite "no": only a person can change it
			_ = workflow.Await(ctx, func() bool { return retry })
			refusals++
			key = fmt.Sprintf("%s-retry-%d", RefundIdempotencyKey(in), refusals)
		} else {
			_, _ = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
				Timeout:      stuckRetryInterval,
				TimerOptions: workflow.TimerOptions{Summary: "Retry refund"},
			}, func() bool { return retry })
		}
		retry = false
	}
}
