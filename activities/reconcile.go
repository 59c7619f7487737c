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
)

// ReconcileStockInput tunes a reconciliation run.
type ReconcileStockInput struct {
	// GraceSeconds: a hold whose checkout ended less than this long ago is left to its saga,
	// which is still releasing or committing it (default 300).
	GraceSeconds int64 `json:"grace_seconds"`
}

// ReconcileStockResult is what a run found and did.
type ReconcileStockResult struct {
	SKUs        int      `json:"skus"`
	Corrections []string `json:"corrections"`
	Unexplained []string `json:"unexplained"`
}

// ReconcileStock first ends the checkouts whose saga is gone without an end (endAbandoned),
// then compares Redis with Postgres for every SKU and repairs drift in the safe
// direction: a hold whose checkout ended (in Postgres) long ago is committed (confirmed
// checkouts) or released (every other end); an operator's change whose Redis step did not
// finish is finished (or undone, if Postgres never recorded it); then every open checkout is
// counted as holding, lost holds are restored, and available is recomputed as
// on_hand - held (lua/reconcile.lua). A SKU Redis lost is rebuilt. Each correction is
// appended to the inventory ledger. A hold whose checkout Postgres does not know is left
// alone and reported as unexplained, for support.
func (a *Activities) ReconcileStock(ctx context.Context, in ReconcileStockInput) (ReconcileStockResult, error) {
	grace := time.Duration(in.GraceSeconds) * time.Second
	if grace <= 0 {
		grace = 5 * time.Minute
	}
	skus, err := a.Store.SKUs(ctx)
	if err != nil {
		return ReconcileStockResult{}, err
	}
	res := ReconcileStockResult{SKUs: len(skus)}
	if err := a.endAbandoned(ctx, grace, &res); err != nil {
		return res, err
	}
	for _, sku := range skus {
		activity.RecordHeartbeat(ctx, sku)
		if err := a.reconcileHolds(ctx, sku, grace, &res); err != nil {
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

// abandonedBatch bounds the open checkouts one reconciler run asks Temporal about; the
// next run (every few minutes) takes the rest.
const abandonedBatch = 500

// endAbandoned records an end for every checkout open in Postgres for longer than grace whose
// saga is no longer running (terminated from the Web UI, dropped at the server's history
// limit, or gone with its retention): nobody else would ever end it, release its holds or
// refund its payments. See store.Store.EndAbandoned; the SKU loop then releases its holds.
func (a *Activities) endAbandoned(ctx context.Context, grace time.Duration, res *ReconcileStockResult) error {
	if a.Temporal == nil {
		return nil
	}
	ids, err := a.Store.OpenCheckoutsOlderThan(ctx, grace, abandonedBatch)
	if err != nil {
		return err
	}
	for _, id := range ids {
		activity.RecordHeartbeat(ctx, id)
		d, err := a.Temporal.DescribeWorkflowExecution(ctx, shop.WorkflowID(id), "")
		var notFound *serviceerror.NotFound
		status := "gone"
		switch {
		case errors.As(err, &notFound):
		case err != nil:
			return fmt.Errorf("describe saga of checkout %s: %w", id, err)
		case d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			continue
		default:
			status = strings.ToLower(strings.TrimPrefix(d.GetWorkflowExecutionInfo().GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))
		}
		reason := "its saga is " + status + " without having recorded an end; ended by the reconciler"
		ended, err := a.Store.EndAbandoned(ctx, id, reason)
		if err != nil {
			return err
		}
		if ended {
			metrics.Outcomes.WithLabelValues(string(shop.StatusFailed)).Inc()
			res.Corrections = append(res.Corrections, fmt.Sprintf("reconcile: checkout %s ended failed: %s", id, reason))
		}
	}
	return nil
}

// reconcileHolds ends the holds of checkouts that ended in Postgres more than grace ago.
func (a *Activities) reconcileHolds(ctx context.Context, sku string, grace time.Duration, res *ReconcileStockResult) error {
	holds, err := a.Stock.Holds(ctx, sku)
	if err != nil || len(holds) == 0 {
		return err
	}
	var ids []string
	for _, h := range holds {
		if _, isChange := lua.IsChangeHold(h.CheckoutID); !isChange {
			ids = append(ids, h.CheckoutID)
		}
	}
	ends, err := a.Store.CheckoutEnds(ctx, ids)
	if err != nil {
		return err
	}
	for _, h := range holds {
		if changeID, isChange := lua.IsChangeHold(h.CheckoutID); isChange {
			note, err := a.Store.FinishChange(ctx, a.Stock, sku, changeID, grace)
			if errors.Is(err, lua.ErrRolledBack) {
				return nil // ReconcileStock resyncs the SKU next (see below); the next run finishes the change
			}
			if err != nil {
				return err
			}
			if note != "" {
				res.Corrections = append(res.Corrections, note)
			}
			continue
		}
		end, known := ends[h.CheckoutID]
		switch {
		case !known:
			res.Unexplained = append(res.Unexplained, fmt.Sprintf("%s: %d held by %s, a checkout Postgres does not know", sku, h.Quantity, h.CheckoutID))
			continue
		case end.EndedAt == nil || time.Since(*end.EndedAt) < grace:
			continue // live, or its saga is still cleaning up
		}
		var note string
		if end.Status == "confirmed" {
			_, err = a.Stock.Commit(ctx, sku, h.CheckoutID)
			note = fmt.Sprintf("reconcile: committed the leftover hold of %d x %s by confirmed checkout %s", h.Quantity, sku, h.CheckoutID)
		} else {
			_, err = a.Stock.Release(ctx, sku, h.CheckoutID)
			note = fmt.Sprintf("reconcile: released the leftover hold of %d x %s by %s checkout %s", h.Quantity, sku, end.Status, h.CheckoutID)
		}
		if errors.Is(err, lua.ErrRolledBack) {
			// Redis went back in time (a failover that lost writes). Every script on this SKU
			// is refused until it is resynced, which ReconcileStock does next: the resync ends
			// the holds of checkouts whose end Postgres recorded, this one included. Failing
			// here instead would stop every run before that resync, for good once no saga
			// touches the SKU again.
			return nil
		}
		if errors.Is(err, lua.ErrHoldCommitted) || errors.Is(err, lua.ErrHoldReleased) || errors.Is(err, lua.ErrNoHold) {
			res.Unexplained = append(res.Unexplained, fmt.Sprintf("%s: hold of %s could not be ended: %v", sku, h.CheckoutID, err))
			continue
		}
		if err != nil {
			return err
		}
		if err := a.Store.LedgerNote(ctx, sku, h.CheckoutID, note); err != nil {
			return err
		}
		res.Corrections = append(res.Corrections, note)
	}
	return nil
}
