package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
)

// OrphanScheduleID is the Temporal Schedule that runs RefundOrphans.
const OrphanScheduleID = "checkout-refund-orphans"

// OrphanSweepEvery is how often unclaimed orphan payments are looked for.
const OrphanSweepEvery = 10 * time.Minute

// OrphanRefundAfter is how long a payment whose checkout does not exist is kept for that
// checkout. Orphans are webhooks that overtook their checkout's POST by seconds; a checkout
// recorded within the bound claims its payment and uses it. After it, the money is given back.
const OrphanRefundAfter = time.Hour

// orphanSweepLimit bounds one run; the next run takes the rest.
const orphanSweepLimit = 200

// RefundOrphansInput tunes a sweep; zero values mean the defaults above.
type RefundOrphansInput struct {
	OlderThanSeconds int64 `json:"older_than_seconds"`
}

// RefundOrphansResult counts the refunds a sweep started.
type RefundOrphansResult struct {
	Refunded int `json:"refunded"`
}

// RefundOrphans refunds every successful payment that no checkout claimed within
// OrphanRefundAfter: money for a checkout that never came cannot be kept. Each refund is a
// Refund workflow whose id is derived from the payment, so a payment is refunded once however
// often it is swept.
func RefundOrphans(ctx workflow.Context, in RefundOrphansInput) (RefundOrphansResult, error) {
	if in.OlderThanSeconds <= 0 {
		in.OlderThanSeconds = int64(OrphanRefundAfter / time.Second)
	}
	ctx = workflow.WithActivityOptions(ctx, reconcileOptions)
	var orphans []shop.StaleOrphan
	if err := workflow.ExecuteActivity(ctx, steps.ClaimStaleOrphans, steps.ClaimStaleOrphansInput{
		OlderThanSeconds: in.OlderThanSeconds, Limit: orphanSweepLimit,
	}).Get(ctx, &orphans); err != nil {
		return RefundOrphansResult{}, err
	}
	var res RefundOrphansResult
	for _, o := range orphans {
		p := shop.Payment{Provider: o.Provider, EventID: o.EventID, PaymentRef: o.PaymentRef, AmountCents: o.AmountCents, Currency: o.Currency}
		refund := RefundOf(o.CheckoutID, "", p, fmt.Sprintf("no checkout claimed the payment within %s", OrphanRefundAfter))
		err := startRefund(ctx, refund, fmt.Sprintf("Refund orphan payment %s of %s", refund.PaymentRef, money(refund.AmountCents, refund.Currency)))
		if err != nil {
			return res, fmt.Errorf("start refund of orphan payment %s: %w", refund.PaymentRef, err)
		}
		res.Refunded++
	}
	return res, nil
}
