package workflows

import (
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/activities"
)

// StockScheduleID is the Temporal Schedule that runs ReconcileStock.
const StockScheduleID = "checkout-reconcile-stock"

// StockReconcileEvery: drift is rare (it needs a crash or a lost Redis), so every five
// minutes bounds how long stock can be undersold without loading Redis or Postgres.
const StockReconcileEvery = 5 * time.Minute

var reconcileStockOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * time.Minute,
	HeartbeatTimeout:    time.Minute,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
}

// ReconcileStock compares Redis with Postgres and repairs drift in the safe direction (see
// activities.ReconcileStock). What it cannot explain flags this run for support: it shows
// in the UI under NeedsAttention = true, with the list in its current details.
func ReconcileStock(ctx workflow.Context, in activities.ReconcileStockInput) (activities.ReconcileStockResult, error) {
	var res activities.ReconcileStockResult
	ctx = workflow.WithActivityOptions(ctx, reconcileStockOptions)
	if err := workflow.ExecuteActivity(ctx, acts.ReconcileStock, in).Get(ctx, &res); err != nil {
		return res, err
	}
	if len(res.Unexplained) > 0 {
		_ = workflow.UpsertTypedSearchAttributes(ctx, AttrNeedsAttention.ValueSet(true))
		workflow.SetCurrentDetails(ctx, "NEEDS ATTENTION: stock the reconciler cannot explain:\n- "+strings.Join(res.Unexplained, "\n- "))
	} else {
		workflow.SetCurrentDetails(ctx, "Reconciled; corrections: "+strings.Join(res.Corrections, "; "))
	}
	return res, nil
}
