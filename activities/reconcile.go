package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"

	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
)

// ReconcileStock first settles the checkouts whose saga is closed without an end
// (endAbandoned), then compares Redis with Postgres for every SKU and repairs drift in the
// safe direction: a hold whose checkout ended (in Postgres) is committed (confirmed
// checkouts) or released (every other end), once its saga is closed or grace has passed; an
// operator's change whose Redis step did not finish is finished (or undone, if Postgres never
// recorded it); then every open checkout is counted as holding, lost holds are restored, and
// available is recomputed as on_hand - held (lua/reconcile.lua). A SKU Redis lost is
// rebuilt. Each correction is appended to the inventory ledger. A hold whose checkout
// Postgres does not know is left alone and reported as unexplained, for support.
func (a *Activities) ReconcileStock(ctx context.Context, in steps.ReconcileStockInput) (steps.ReconcileStockResult, error) {
	grace := time.Duration(in.GraceSeconds) * time.Second
	if grace <= 0 {
		grace = 5 * time.Minute
	}
	skus, err := a.Store.SKUs(ctx)
	if err != nil {
		return steps.ReconcileStockResult{}, err
	}
	res := steps.ReconcileStockResult{SKUs: len(skus)}
	run := &reconcileRun{a: a, grace: grace, sagas: map[string]string{}}
	if err := a.endAbandoned(ctx, run, &res); err != nil {
		return res, err
	}
	for _, sku := range skus {
		activity.RecordHeartbeat(ctx, sku)
		if err := a.reconcileHolds(ctx, sku, run, &res); err != nil {
			return res, err
		}
		note, err := a.Store.ResyncStock(ctx, a.Stock, sku)
		if err != nil {
			return res, err
		}
		if _, err := a.Stock.SweepHoldEnds(ctx, sku); err != nil { // Redis 7.0 has no per-field TTL
			return res, err
		}
		if note != "" {
			res.Corrections = append(res.Corrections, note)
		}
	}
	if len(res.Corrections)+len(res.Unexplained) > 0 {
		activity.GetLogger(ctx).Warn("stock reconciled", "corrections", len(res.Corrections), "unexplained", len(res.Unexplained))
	}
	return res, nil
}

// reconcileRun is what one reconciliation run knows: its grace, and what Temporal said of
// each saga it asked about.
type reconcileRun struct {
	a     *Activities
	grace time.Duration
	sagas map[string]string // checkout id -> sagaStatus, "" when Temporal could not say
}

// sagaClosed reports whether the saga of checkoutID will never act again, and how Temporal
// names its state, asking once per run. A saga Temporal cannot answer for may still act: its
// grace holds.
func (r *reconcileRun) sagaClosed(ctx context.Context, checkoutID string) (status string, closed bool) {
	status, ok := r.sagas[checkoutID]
	if !ok {
		var err error
		if status, err = r.a.sagaStatus(ctx, checkoutID); err != nil {
			activity.GetLogger(ctx).Warn("describe saga", "checkout_id", checkoutID, "error", err)
		}
		r.sagas[checkoutID] = status
	}
	return status, status != "" && status != sagaRunning
}

// abandonedPage is how many open checkouts the reconciler reads at once; it asks Temporal
// about every open checkout, a page at a time.
const abandonedPage = 500

// endAbandoned settles every checkout open in Postgres whose saga is closed without having
// recorded an end (terminated from the Web UI, reset past its end, timed out, dropped at the
// server's history limit, or gone with its retention): nobody else would ever end it, release
// its holds or refund its payments, and nothing needs to wait for a saga that will never act
// again. See settle. A checkout whose saga Temporal cannot answer for is left for the next
// run.
func (a *Activities) endAbandoned(ctx context.Context, run *reconcileRun, res *steps.ReconcileStockResult) error {
	if a.Temporal == nil {
		return nil
	}
	after := ""
	for {
		ids, err := a.Store.OpenCheckouts(ctx, after, abandonedPage)
		if err != nil {
			return err
		}
		for _, id := range ids {
			activity.RecordHeartbeat(ctx, id)
			status, closed := run.sagaClosed(ctx, id)
			if !closed {
				continue
			}
			s, err := a.settle(ctx, id, status)
			if err != nil {
				return err
			}
			res.Corrections = append(res.Corrections, s.Corrections...)
			res.Unexplained = append(res.Unexplained, s.Unexplained...)
			res.Refunds = append(res.Refunds, s.Refunds...)
		}
		if len(ids) < abandonedPage {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

// sagaRunning is sagaStatus's answer for a saga that may still act.
const sagaRunning = "running"

// sagaStatus is how Temporal names the state of the saga of checkoutID: "running",
// "gone" (no execution: retention dropped it), or how its latest run closed ("terminated",
// "timed_out", "completed", ...). A reset's new run is the latest, so it counts as running.
func (a *Activities) sagaStatus(ctx context.Context, checkoutID string) (string, error) {
	if a.Temporal == nil {
		return "", errors.New("no temporal client")
	}
	d, err := a.Temporal.DescribeWorkflowExecution(ctx, shop.WorkflowID(checkoutID), "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return "gone", nil
	case err != nil:
		return "", fmt.Errorf("describe saga of checkout %s: %w", checkoutID, err)
	}
	status := d.GetWorkflowExecutionInfo().GetStatus()
	if status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return sagaRunning, nil
	}
	return strings.ToLower(strings.TrimPrefix(status.String(), "WORKFLOW_EXECUTION_STATUS_")), nil
}

// SettleCheckout settles one checkout whose saga is closed without an end, as the
// reconciler does (settle): a payment webhook that meets such a saga need not wait for the
// next run. A saga that may still act is left alone.
func (a *Activities) SettleCheckout(ctx context.Context, in steps.SettleCheckoutInput) (steps.SettleCheckoutResult, error) {
	status, err := a.sagaStatus(ctx, in.CheckoutID)
	if err != nil || status == sagaRunning {
		return steps.SettleCheckoutResult{Saga: status}, err
	}
	return a.settle(ctx, in.CheckoutID, status)
}

// settle ends a checkout whose saga is closed (status names how) without the wait a live
// saga gets: it records the end failed unless Postgres has one (store.Store.EndAbandoned,
// which also routes its unclaimed payments to refunds), then releases its holds. Releasing
// leaves a tombstone, so a reserve the stopped saga still had in flight is refused. A
// checkout whose confirm, in flight as its saga stopped, won the race keeps its holds for
// the reconciler to commit.
func (a *Activities) settle(ctx context.Context, checkoutID, status string) (steps.SettleCheckoutResult, error) {
	res := steps.SettleCheckoutResult{Saga: status}
	reason := "its saga is " + status + " without having recorded an end; ended, its holds released and its payments refunded without it"
	ended, refunds, err := a.Store.EndAbandoned(ctx, checkoutID, reason)
	if err != nil {
		return res, err
	}
	res.Ended, res.Refunds = ended, refunds
	if ended {
		metrics.Outcomes.WithLabelValues(string(shop.StatusFailed)).Inc()
		res.Corrections = append(res.Corrections, fmt.Sprintf("reconcile: checkout %s ended failed: %s", checkoutID, reason))
	}
	rec, err := a.Store.Checkout(ctx, checkoutID)
	if err != nil {
		return res, fmt.Errorf("settle checkout %s: %w", checkoutID, err)
	}
	if rec.Status == string(shop.StatusConfirmed) {
		return res, nil // a confirm won the race with the end: reconcileHolds commits its holds
	}
	for _, it := range rec.Items {
		note, err := a.endLeftoverHold(ctx, it.SKU, checkoutID, rec.Status)
		switch {
		case errors.Is(err, errHoldNotEnded):
			res.Unexplained = append(res.Unexplained, note)
		case err != nil:
			return res, err
		case note != "":
			res.Corrections = append(res.Corrections, note)
		}
	}
	return res, nil
}

// errHoldNotEnded: a leftover hold that could not be ended (already ended the other way);
// the note says which, for support.
var errHoldNotEnded = errors.New("hold could not be ended")

// endLeftoverHold ends what checkoutID, which ended as status in Postgres, still holds of
// sku: it commits a confirmed checkout's hold and releases any other's, and notes it in the
// ledger. It answers "" when nothing was held, and when Redis went back in time: every
// script on the SKU is refused until it is resynced, which ReconcileStock does next, ending
// the holds of checkouts whose end Postgres recorded (failing here instead would stop every
// run before that resync, for good once no saga touches the SKU again).
func (a *Activities) endLeftoverHold(ctx context.Context, sku, checkoutID, status string) (string, error) {
	var n int64
	var err error
	verb := "released"
	if status == string(shop.StatusConfirmed) {
		verb = "committed"
		n, err = a.Stock.Commit(ctx, sku, checkoutID)
	} else {
		n, err = a.Stock.Release(ctx, sku, checkoutID)
	}
	switch {
	case errors.Is(err, lua.ErrRolledBack):
		return "", nil
	case errors.Is(err, lua.ErrHoldCommitted) || errors.Is(err, lua.ErrHoldReleased) || errors.Is(err, lua.ErrNoHold):
		return fmt.Sprintf("%s: hold of %s could not be ended: %v", sku, checkoutID, err), errHoldNotEnded
	case err != nil:
		return "", err
	case n == 0:
		return "", nil
	}
	note := fmt.Sprintf("reconcile: %s the leftover hold of %d x %s by %s checkout %s", verb, n, sku, status, checkoutID)
	if err := a.Store.LedgerNote(ctx, sku, checkoutID, note); err != nil {
		return "", err
	}
	return note, nil
}

// holdFate is what the reconciler does with a checkout's hold.
type holdFate int

const (
	holdLeft    holdFate = iota // left to its saga, which holds it or is still ending it
	holdUnknown                 // Postgres does not know the checkout: reported, left alone
	holdEnd                     // ended now: committed (confirmed checkouts) or released
)

// fateOfHold decides a checkout's hold. A live checkout's hold is its saga's (endAbandoned
// already settled those whose saga is closed). An ended checkout's hold is ended once grace
// has passed since the end, or at once when its saga is closed: a running saga may still be
// ending it itself, a closed one will never act again. sagaClosed asks Temporal, only for
// an end younger than grace.
func fateOfHold(end store.CheckoutEnd, known bool, now time.Time, grace time.Duration, sagaClosed func() bool) holdFate {
	switch {
	case !known:
		return holdUnknown
	case end.EndedAt == nil:
		return holdLeft
	case now.Sub(*end.EndedAt) >= grace || sagaClosed():
		return holdEnd
	}
	return holdLeft
}

// reconcileHolds ends what is left of sku's holds: the checkouts' holds whose checkout ended
// in Postgres (endCheckoutHolds) and the holds of operators' changes (finishChanges).
func (a *Activities) reconcileHolds(ctx context.Context, sku string, run *reconcileRun, res *steps.ReconcileStockResult) error {
	holds, err := a.Stock.Holds(ctx, sku)
	if err != nil || len(holds) == 0 {
		return err
	}
	var checkouts []lua.Hold
	var changes []string
	for _, h := range holds {
		if changeID, isChange := lua.IsChangeHold(h.CheckoutID); isChange {
			changes = append(changes, changeID)
		} else {
			checkouts = append(checkouts, h)
		}
	}
	if err := a.endCheckoutHolds(ctx, sku, checkouts, run, res); err != nil {
		return err
	}
	return a.finishChanges(ctx, sku, changes, run, res)
}

// endCheckoutHolds ends the holds of checkouts that ended in Postgres, as fateOfHold decides.
func (a *Activities) endCheckoutHolds(ctx context.Context, sku string, holds []lua.Hold, run *reconcileRun, res *steps.ReconcileStockResult) error {
	ids := make([]string, 0, len(holds))
	for _, h := range holds {
		ids = append(ids, h.CheckoutID)
	}
	ends, err := a.Store.CheckoutEnds(ctx, ids)
	if err != nil {
		return err
	}
	for _, h := range holds {
		end, known := ends[h.CheckoutID]
		switch fateOfHold(end, known, time.Now(), run.grace, func() bool {
			_, closed := run.sagaClosed(ctx, h.CheckoutID)
			return closed
		}) {
		case holdUnknown:
			res.Unexplained = append(res.Unexplained, fmt.Sprintf("%s: %d held by %s, a checkout Postgres does not know", sku, h.Quantity, h.CheckoutID))
			continue
		case holdLeft:
			continue
		}
		note, err := a.endLeftoverHold(ctx, sku, h.CheckoutID, end.Status)
		switch {
		case errors.Is(err, errHoldNotEnded):
			res.Unexplained = append(res.Unexplained, note)
		case err != nil:
			return err
		case note != "":
			res.Corrections = append(res.Corrections, note)
		}
	}
	return nil
}

// finishChanges finishes the operators' changes whose holds are left on sku: each is applied
// or dropped as Postgres recorded it (store.FinishChange).
func (a *Activities) finishChanges(ctx context.Context, sku string, changeIDs []string, run *reconcileRun, res *steps.ReconcileStockResult) error {
	for _, changeID := range changeIDs {
		note, err := a.Store.FinishChange(ctx, a.Stock, sku, changeID, run.grace)
		if errors.Is(err, lua.ErrRolledBack) {
			return nil // ReconcileStock resyncs the SKU next; the next run finishes the change
		}
		if err != nil {
			return err
		}
		if note != "" {
			res.Corrections = append(res.Corrections, note)
		}
	}
	return nil
}
