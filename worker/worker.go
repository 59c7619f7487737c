// Package worker wires a Temporal worker that runs the Checkout saga and its activities on
// the checkout task queue.
package worker

import (
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// StopTimeout is how long a stopping worker lets its running steps finish.
const StopTimeout = 15 * time.Second

// New returns a worker with the Checkout workflow and every activity registered. The caller
// starts it (Run or Start) and stops it.
func New(c client.Client, acts *activities.Activities) sdkworker.Worker {
	w := sdkworker.New(c, workflows.TaskQueue, Options(localActivityLimit(acts)))
	Register(w, acts)
	return w
}

// Options are the checkout worker's settings, with at most localActivities local activities
// at once (the Postgres pool's size). The benchmark runs its baseline workflows with them too,
// so a checkout is compared with workflows polled and cached the same way.
func Options(localActivities int) sdkworker.Options {
	return sdkworker.Options{
		// A flash sale starts hundreds of sagas at once; the SDK's default of two pollers per
		// task type leaves them queued on the server while the worker idles, and a fixed
		// eight keeps polls open (server work) while the shop is quiet. Autoscaling follows
		// the server's hints: more pollers while tasks wait, down to one while idle.
		WorkflowTaskPollerBehavior: pollers(),
		ActivityTaskPollerBehavior: pollers(),
		// Stop waits this long for running activities and local activities, longer than the
		// longest attempt (10 s, the saga's must-finish steps), so a deploy lets a release or
		// confirm finish here instead of abandoning it to time out and run again elsewhere.
		WorkerStopTimeout: StopTimeout,
		// Record, reserve (with its rebuild), confirm and commit run as local activities, most
		// of them on Postgres. The SDK's default of 1000 at once queued them behind the pool,
		// where the wait ate their 5 s and 10 s budgets and the retries added load; one per
		// connection lets each start only when it can run.
		MaxConcurrentLocalActivityExecutionSize: localActivities,
	}
}

// pollers autoscales the pollers of one task type between 1 and 32, from 8.
func pollers() sdkworker.PollerBehavior {
	return sdkworker.NewPollerBehaviorAutoscaling(sdkworker.PollerBehaviorAutoscalingOptions{
		InitialNumberOfPollers: 8, MinimumNumberOfPollers: 1, MaximumNumberOfPollers: 32,
	})
}

// localActivityLimit is the Postgres pool's size (store.DefaultPoolMaxConns unless
// DATABASE_URL sets pool_max_conns).
func localActivityLimit(acts *activities.Activities) int {
	if acts.Store == nil {
		return store.DefaultPoolMaxConns
	}
	return acts.Store.MaxConns()
}

// Register adds the saga, its helper workflows and the activities to any registry: a worker, a replayer or the
// SDK's test environment.
func Register(r sdkworker.Registry, acts *activities.Activities) {
	r.RegisterWorkflow(workflows.Checkout)
	r.RegisterWorkflow(workflows.Refund)
	r.RegisterWorkflow(workflows.ReconcilePayments)
	r.RegisterWorkflow(workflows.ReconcileStock)
	r.RegisterWorkflow(workflows.RefundOrphans)
	r.RegisterWorkflow(workflows.SettleCheckout)
	for _, s := range Steps(acts) {
		r.RegisterActivityWithOptions(s.Activity, activity.RegisterOptions{Name: s.Name})
	}
}

// Step is an activity and the name the saga calls it by.
type Step struct {
	Name     string
	Activity any
}

// Steps pairs each of the saga's step names with the activity that runs it. Every name is its
// method's name, which Temporal gave the method values the saga called before it called steps
// by name: a history recorded either way replays.
func Steps(acts *activities.Activities) []Step {
	return []Step{
		{steps.RecordCheckout, acts.RecordCheckout},
		{steps.ReserveStock, acts.ReserveStock},
		{steps.ReleaseStock, acts.ReleaseStock},
		{steps.CommitStock, acts.CommitStock},
		{steps.ForfeitStock, acts.ForfeitStock},
		{steps.ConfirmOrder, acts.ConfirmOrder},
		{steps.RecordOutcome, acts.RecordOutcome},
		{steps.VerifyPayment, acts.VerifyPayment},
		{steps.RefundPayment, acts.RefundPayment},
		{steps.RecordRefund, acts.RecordRefund},
		{steps.FindSucceededPayment, acts.FindSucceededPayment},
		{steps.FindSucceededPayments, acts.FindSucceededPayments},
		{steps.ReadPaymentFates, acts.ReadPaymentFates},
		{steps.ListWorkflowIDs, acts.ListWorkflowIDs},
		{steps.ListWorkflowPage, acts.ListWorkflowPage},
		{steps.ClaimStaleOrphans, acts.ClaimStaleOrphans},
		{steps.ReconcileStock, acts.ReconcileStock},
		{steps.SettleCheckout, acts.SettleCheckout},
	}
}
