package workflows_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/worker"
)

// Replay safety. Every file in testdata/ is the full history of one real execution, recorded
// on a Temporal dev server by TestRecordHistories (record_test.go, built with -tags record).
// Replaying it with today's workflow code must produce exactly the commands the history
// holds: a change that would break sagas already running in production (a step added,
// removed or reordered without workflow.GetVersion, a timer or child started differently)
// fails here, in CI, before a worker with that code is deployed. See docs/saga-changes.md.

// recordedHistories are the paths every build must replay: one history per saga path and
// helper workflow. Deleting a file does not make the test pass; it fails until the history
// is recorded again.
var recordedHistories = []string{
	"confirmed",                     // update-with-start, payment signal, ConfirmOrder, CommitStock per SKU (confirmed_before_payment_keys.json is the shape before payment-keys-by-provider and before shapes)
	"out_of_stock",                  // the second SKU is short: the first hold is released
	"expired",                       // the payment timer fires
	"cancelled_by_update",           // the cancel update while waiting for payment
	"cancelled_by_workflow_cancel",  // the workflow itself is cancelled: releases on a disconnected context
	"payment_failed_then_succeeded", // a declined card, then a good one
	"payment_canceled",              // the payment intent is canceled: payment_failed at once
	"wrong_amount",                  // flagged, a Refund child started, then the timer fires
	"extended",                      // the extend update restarts the payment timer, then paid
	"duplicate_payment_signals",     // the same event twice and the same payment under a second event id (duplicate_payment_signals_before_payment_keys.json is the shape before payment-keys-by-provider)
	"refund",                        // the Refund child of wrong_amount, refunded through Stripe
	"reconcile_payments",            // ReconcilePayments pages the checkouts near their deadline, finds a missed payment and signals the saga (reconcile_payments_before_skips_refunding.json is the shape before reconcile-skips-refunding, reconcile_payments_every_payment.json the one before reconcile-pages, reconcile_payments_one_payment.json the one before reconcile-every-payment)
	"reconcile_stock",               // ReconcileStock finds a hold nobody knows and flags itself
	"reconcile_stock_settles",       // ReconcileStock settles a terminated saga's checkout and starts its payment's refund (reconcile-stock-starts-refunds)
	"settle_checkout",               // SettleCheckout, as a webhook starts it: ends a terminated saga's checkout, releases its hold, starts its payment's refund

	"paid_behind_a_failed_card_at_the_deadline", // worker down across the deadline: a declined card, a good one and the timer in one task (pending-payments-before-an-end)
	"refund_in_the_task_of_a_workflow_cancel",   // a wrong amount and the workflow's cancellation in one task: the refund still starts (refunds-outlive-cancellation)
	"unverified_payment_signals",                // shape 2: a succeeded and a canceled signal no verified event recorded are verified, flagged and ignored; then a verified payment confirms
}

const historiesDir = "testdata"

func historyFile(name string) string { return filepath.Join(historiesDir, name+".json") }

func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(historiesDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no recorded histories in workflows/%s: record them with go test -tags record -count=1 -run TestRecordHistories ./workflows/ (record_test.go)", historiesDir)
	}
	for _, name := range recordedHistories {
		if !slices.Contains(files, historyFile(name)) {
			t.Errorf("the history of path %q is missing (%s): record it with go test -tags record -count=1 -run TestRecordHistories ./workflows/ (record_test.go)", name, historyFile(name))
		}
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".json"), func(t *testing.T) {
			if err := replayHistory(file); err != nil {
				t.Errorf("replay %s with today's workflow code: %v\n"+
					"A running saga with this history would fail the same way after a deploy. Keep the old behaviour "+
					"for running sagas with workflow.GetVersion (docs/saga-changes.md); re-record only "+
					"if no execution of the old code can still be running.", file, err)
			}
		})
	}
}

// replayHistory replays one recorded history with every workflow the worker registers.
func replayHistory(file string) error {
	r := sdkworker.NewWorkflowReplayer()
	// The same registration as the real worker, so a workflow added to worker.Register is
	// replayable as soon as its history is recorded. Activities never run on replay: their
	// results come from the history, so the nil-backed value only lends its method names.
	worker.Register(replayRegistry{WorkflowReplayer: r}, &activities.Activities{})
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	return r.ReplayWorkflowHistoryFromJSONFile(logger, file)
}

// replayRegistry lets worker.Register fill a replayer: workflows are registered, activities
// (which a replayer never runs) are dropped. The project registers no Nexus services; the
// nil NexusServiceRegistry would panic if it ever did, since a replayer cannot take them.
type replayRegistry struct {
	sdkworker.WorkflowReplayer
	sdkworker.NexusServiceRegistry
}

func (replayRegistry) RegisterActivity(any)                                         {}
func (replayRegistry) RegisterActivityWithOptions(any, activity.RegisterOptions)    {}
func (replayRegistry) RegisterDynamicActivity(any, activity.DynamicRegisterOptions) {}
