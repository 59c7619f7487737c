package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
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
	// Continued is set by a run that continued as new: what it knew. Nil for the first run.
	Continued *RefundContinuation `json:"continued,omitempty"`
}

// RefundOf is the Refund workflow's input for payment p of a checkout (customerID may be
// unknown: ""). Every refund is built here, so none misses a field or its currency's case.
func RefundOf(checkoutID, customerID string, p shop.Payment, reason string) RefundInput {
	return RefundInput{
		CheckoutID: checkoutID, CustomerID: customerID, Provider: p.Provider, PaymentRef: p.PaymentRef,
		EventID: p.EventID, AmountCents: p.AmountCents, Currency: strings.ToLower(p.Currency), Reason: reason,
	}
}

// RefundView is a refund as support sees it (the refund's status query).
type RefundView struct {
	RefundInput
	Status           string `json:"status"` // requested, refunded, stuck, kept
	ProviderRefundID string `json:"provider_refund_id,omitempty"`
	Attention        string `json:"attention,omitempty"`
}

// Refund statuses.
const (
	RefundRequested = "requested"
	RefundRefunded  = "refunded"
	RefundStuck     = "stuck"
	// RefundKept: not refunded, because the payment paid an order (shop.ErrTypePaymentKept).
	RefundKept = "kept"
)

// RefundWorkflowID is the id of the refund of one payment: one refund workflow per payment,
// whoever asks for it (the saga for a late payment, the webhook handler once the saga closed).
// It reads "refund-stripe-pi_3Nx...", and two payments never share it:
//
//   - A provider without '-' (stripe) keeps "refund-<provider>-<ref>": the first '-' after
//     "refund-" ends the provider, whatever the ref holds. Keeping it is what lets running
//     sagas replay: the saga starts its Refund child under this id, and a child's id is part
//     of the history (workflows/testdata/wrong_amount.json).
//   - A provider with '-' gets "refund:<provider>:<ref>". Provider names never contain ':'
//     (api.ParseStandardWebhookSecrets), so the first ':' after "refund:" ends the provider;
//     and no id of the first form starts with "refund:". Before, provider "pay" with ref
//     "x-1" and provider "pay-x" with ref "1" shared one id, and the second refund never ran.
func RefundWorkflowID(provider, paymentRef string) string {
	if strings.Contains(provider, "-") {
		return "refund:" + provider + ":" + paymentRef
	}
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

// startRefund starts the Refund workflow of a payment as an abandoned child: a refund outlives
// the workflow that asked for it. Its id is derived from the payment, so a payment is never
// refunded by two workflows; one already started counts as started.
func startRefund(ctx workflow.Context, in RefundInput, summary string) error {
	_, err := startNewRefund(ctx, in, summary)
	return err
}

// startNewRefund is startRefund that also tells whether this call started the refund (false:
// its Refund workflow already existed).
func startNewRefund(ctx workflow.Context, in RefundInput, summary string) (bool, error) {
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            RefundWorkflowID(in.Provider, in.PaymentRef),
		TaskQueue:             TaskQueue,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		StaticSummary:         summary,
		TypedSearchAttributes: RefundAttributes(in),
	})
	err := workflow.ExecuteChildWorkflow(cctx, Refund, in).GetChildWorkflowExecution().Get(ctx, nil)
	if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return false, nil
	}
	return err == nil, err
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

// refundLoopsPerRun bounds one run of a refund that keeps failing: each failed round (ten
// attempts, then the stuckRetryInterval timer) adds about 11 history events, so 100 rounds,
// about 12 hours, keep a run near 1,100 events, far below the server's 51,200-event limit and
// cheap to replay when a worker picks the refund up. The run then continues as new, carrying
// what it knows in RefundInput.Continued. The server's own suggestion (about 4,000 events or
// 4 MB) ends a run earlier if it comes first.
const refundLoopsPerRun = 100

// RefundContinuation is what one run of a refund hands to the next when it continues as new.
// A run continues only after a failed round, so the refund is stuck: the next run starts by
// asking the provider again, under the same idempotency key.
type RefundContinuation struct {
	IdempotencyKey string `json:"idempotency_key"`
	Refusals       int    `json:"refusals"` // definite refusals so far; names the next key
	Attention      string `json:"attention"`
}

// Refund gives one payment back through its provider and records it in Postgres. A refund
// the provider refuses for good (a disputed charge, say) waits for support: they refund by
// hand in the provider's dashboard, or fix the cause, and send the retry update. A refund
// that keeps failing retryably (a revoked key, a long outage) continues as new every
// refundLoopsPerRun rounds, so it can wait for weeks without reaching the history limit.
func Refund(ctx workflow.Context, in RefundInput) (RefundView, error) {
	carried := in.Continued
	in.Continued = nil // the view shows the payment, not the bookkeeping between runs
	r := &refund{in: in, view: RefundView{RefundInput: in, Status: RefundRequested}}
	if err := r.registerHandlers(ctx); err != nil {
		return r.view, err
	}
	r.bounded = workflow.GetVersion(ctx, refundBoundedHistory, workflow.DefaultVersion, 1) == 1
	r.summary = fmt.Sprintf("Refund %s of payment %s (checkout %s)", money(in.AmountCents, in.Currency), in.PaymentRef, in.CheckoutID)
	r.key = RefundIdempotencyKey(in)
	if carried != nil {
		r.key, r.refusals = carried.IdempotencyKey, carried.Refusals
		r.view.Status, r.view.Attention, r.recorded = RefundStuck, carried.Attention, RefundStuck
	} else if err := r.record(ctx, RefundRequested); IsErrorType(err, shop.ErrTypePaymentKept) {
		// The payment paid an order, so whoever asked for this refund was wrong about it:
		// a saga's run that judged it late, say, after an earlier attempt of its workflow
		// task had confirmed the order with it in a local activity and was lost. The
		// order keeps the money.
		r.view.Status = RefundKept
		workflow.SetCurrentDetails(ctx, "Not refunded: the payment paid an order ("+r.summary+")")
		return r.view, nil
	}
	return r.run(ctx)
}

// refund is one run of the Refund workflow: what it has asked the provider, what it has
// recorded, and what support sees.
type refund struct {
	in      RefundInput // the payment (Continued cleared)
	view    RefundView  // the status query's answer
	summary string      // the refund in a line, for the UI and the activity's summary
	bounded bool        // the run continues as new (refundBoundedHistory) and skips unchanged writes
	retry   bool        // support's retry update arrived during the wait

	recorded string // the status Postgres has from this workflow
	// key is the idempotency key of the current request. It changes only after the provider
	// refused for good and support asked again: the provider keeps answering a key with its
	// first answer (Stripe for 24 hours), and a definite refusal means no refund was made
	// under the old key, so a new key cannot refund twice. After an unknown outcome (a
	// timeout, a 5xx) the key stays the same.
	key      string
	refusals int // definite refusals so far; names the next key
}

// registerHandlers registers the status query and the retry update, which only a stuck
// refund accepts.
func (r *refund) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (RefundView, error) { return r.view, nil }); err != nil {
		return fmt.Errorf("register status query: %w", err)
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateRetry,
		func(ctx workflow.Context, _ RetryRequest) (RefundView, error) { r.retry = true; return r.view, nil },
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, _ RetryRequest) error {
			if r.view.Status != RefundStuck {
				return temporal.NewApplicationError("the refund is not waiting to be retried", shop.ErrTypeNothingToRetry)
			}
			return nil
		}})
	if err != nil {
		return fmt.Errorf("register retry update: %w", err)
	}
	return nil
}

// run asks the provider in rounds until it refunds, waiting between failed rounds for the
// stuck interval or support's retry, and continues as new when the history has grown long.
func (r *refund) run(ctx workflow.Context) (RefundView, error) {
	for loops := 0; ; loops++ {
		// Continue as new only here, between rounds: the wait is over and the next thing is
		// a request to the provider, which the next run makes first. A retry update that
		// ended the wait has done its job; nothing else is in flight.
		if r.bounded && loops > 0 && (loops >= refundLoopsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested()) {
			return r.view, workflow.NewContinueAsNewError(ctx, Refund, withContinuation(r.in, RefundContinuation{
				IdempotencyKey: r.key, Refusals: r.refusals, Attention: r.view.Attention,
			}))
		}
		workflow.SetCurrentDetails(ctx, r.summary+": "+r.in.Reason)
		res, err := r.ask(ctx)
		if err == nil {
			r.view.Status, r.view.ProviderRefundID, r.view.Attention = RefundRefunded, res.ID, ""
			r.flag(ctx, false)
			r.record(ctx, RefundRefunded)
			workflow.SetCurrentDetails(ctx, "Refunded: "+r.summary)
			return r.view, nil
		}
		r.stuck(ctx, err)
	}
}

// ask sends the refund to the provider under the current key.
func (r *refund) ask(ctx workflow.Context) (steps.RefundResult, error) {
	var res steps.RefundResult
	actx := workflow.WithActivityOptions(ctx, withSummary(refundOptions, r.summary))
	err := workflow.ExecuteActivity(actx, steps.RefundPayment, steps.RefundPaymentInput{
		Provider: r.in.Provider, PaymentRef: r.in.PaymentRef, AmountCents: r.in.AmountCents, Currency: r.in.Currency,
		IdempotencyKey: r.key, Reason: r.in.Reason,
	}).Get(ctx, &res)
	return res, err
}

// stuck flags a failed round for support and waits: for support's retry after a definite
// refusal (then under a new key), or for the stuck interval or the retry after any other
// failure.
func (r *refund) stuck(ctx workflow.Context, err error) {
	var appErr *temporal.ApplicationError
	refused := errors.As(err, &appErr) && appErr.NonRetryable()
	r.view.Status = RefundStuck
	r.view.Attention = fmt.Sprintf("%s keeps failing: %s. Fix the cause and send the retry update, or refund by hand in the provider's dashboard and then retry (the provider answers an already-refunded payment as done).",
		r.summary, errorText(err))
	r.flag(ctx, true)
	r.record(ctx, RefundStuck)
	workflow.SetCurrentDetails(ctx, "NEEDS ATTENTION: "+r.view.Attention)
	if refused { // a definite "no": only a person can change it
		_ = workflow.Await(ctx, func() bool { return r.retry })
		r.refusals++
		r.key = fmt.Sprintf("%s-retry-%d", RefundIdempotencyKey(r.in), r.refusals)
	} else {
		_, _ = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
			Timeout:      stuckRetryInterval,
			TimerOptions: workflow.TimerOptions{Summary: "Retry refund"},
		}, func() bool { return r.retry })
	}
	r.retry = false
}

// record writes status to Postgres; a failure is logged, and the next status is written
// anyway. It returns the failure, for the first write (a payment that paid an order is
// refused: shop.ErrTypePaymentKept).
func (r *refund) record(ctx workflow.Context, status string) error {
	if r.bounded && status == r.recorded {
		return nil // unchanged: another marker in the history would say nothing new
	}
	lctx := workflow.WithLocalActivityOptions(ctx, withLocalSummary(undoOptions, "Record refund "+status))
	err := workflow.ExecuteLocalActivity(lctx, steps.RecordRefund, steps.RecordRefundInput{
		ID: RefundIdempotencyKey(r.in), CheckoutID: r.in.CheckoutID, Provider: r.in.Provider, PaymentRef: r.in.PaymentRef,
		AmountCents: r.in.AmountCents, Currency: r.in.Currency, Reason: r.in.Reason, Status: status,
		ProviderRefundID: r.view.ProviderRefundID,
	}).Get(ctx, nil)
	switch {
	case IsErrorType(err, shop.ErrTypePaymentKept):
		// Handled by the caller: the order keeps the money, and nothing is wrong to fix.
		workflow.GetLogger(ctx).Warn("refund not recorded: the payment paid an order", "status", status)
		return err
	case err != nil:
		workflow.GetLogger(ctx).Error("record refund", "status", status, "error", err)
		return err
	}
	r.recorded = status
	return nil
}

// flag sets NeedsAttention, unless a bounded run's attribute already says so (a continued
// run inherits its attributes).
func (r *refund) flag(ctx workflow.Context, needs bool) {
	if r.bounded {
		if cur, ok := workflow.GetTypedSearchAttributes(ctx).GetBool(AttrNeedsAttention); ok && cur == needs {
			return // unchanged
		}
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx, AttrNeedsAttention.ValueSet(needs))
}

func withContinuation(in RefundInput, c RefundContinuation) RefundInput {
	in.Continued = &c
	return in
}
