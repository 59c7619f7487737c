// Package worker wires a Temporal worker that runs the Checkout saga and its activities on
// the checkout task queue.
package worker

import (
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// StopTimeout is how long a stopping worker lets its running steps finish.
const StopTimeout = 15 * time.Second

// DefaultDeployment is the worker deployment the checkout workers belong to
// (WORKER_DEPLOYMENT).
const DefaultDeployment = "checkout"

// Build is the build a worker runs, for Worker Versioning: a version (ID) of a worker
// deployment (Deployment). The zero Build is an unversioned worker, which takes the tasks of
// every saga that no version was made current for.
//
// A versioned worker takes only the tasks of its own version: new sagas once an operator made
// its version the deployment's current one (`checkout deployment set-current`), and every task
// of a saga that started on it, for the saga's whole life, whatever is current by then (the
// sagas are pinned, see Register). So a deploy runs the new build beside the old one, makes
// the new one current, and retires the old one once its sagas have closed; a rollback makes
// the old one current again (docs/operations.md#a-rolling-deploy-and-a-rollback).
type Build struct {
	Deployment string // WORKER_DEPLOYMENT
	ID         string // WORKER_BUILD_ID; empty: unversioned
}

// Versioned reports whether the worker opts into Worker Versioning.
func (b Build) Versioned() bool { return b.ID != "" }

// deploymentOptions are the SDK's options for the build. A versioned worker's sagas are
// pinned unless they register otherwise: a checkout lives at most MaxHold, so the build it
// started on can outlive it, and a running checkout then never meets another build's code.
func (b Build) deploymentOptions() sdkworker.DeploymentOptions {
	if !b.Versioned() {
		return sdkworker.DeploymentOptions{}
	}
	return sdkworker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   sdkworker.WorkerDeploymentVersion{DeploymentName: b.Deployment, BuildID: b.ID},
		DefaultVersioningBehavior: workflow.VersioningBehaviorPinned,
	}
}

// New returns a worker of build b with the Checkout workflow and every activity registered.
// The caller starts it (Run or Start) and stops it.
func New(c client.Client, acts *activities.Activities, b Build) sdkworker.Worker {
	opts := Options(localActivityLimit(acts))
	opts.DeploymentOptions = b.deploymentOptions()
	w := sdkworker.New(c, workflows.TaskQueue, opts)
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
//
// On a versioned worker every workflow is pinned to the build it started on (the default of
// Build's options) except Refund, which auto-upgrades: a refund can wait for support for
// days, longer than an old build should be kept running, so it moves to the current build at
// its next task and keeps changing its code only behind workflow.GetVersion
// (docs/saga-changes.md). An unversioned worker sends no behaviour at all.
func Register(r sdkworker.Registry, acts *activities.Activities) {
	r.RegisterWorkflow(workflows.Checkout)
	r.RegisterWorkflowWithOptions(workflows.Refund, workflow.RegisterOptions{VersioningBehavior: workflow.VersioningBehaviorAutoUpgrade})
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
