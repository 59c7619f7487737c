package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// A saga of a shape newer than the worker knows (an API deployed ahead of its workers started
// it) waits on a real server for a worker that knows the shape: the product's worker fails its
// first workflow task with a failure naming the shape, records and holds nothing, and the
// saga stays running, its task retried, rather than run as an older shape or fail. The start
// is the API's (StartOptions) but for the shape, which StartOperation would force to the
// newest.
func TestASagaOfANewerShapeWaitsForAWorkerThatKnowsIt(t *testing.T) {
	t.Parallel()
	p := checkouttest.Start(t, checkouttest.Options{NoAPI: true})
	ctx := t.Context()
	sku := testenv.RandomID("SHAPE-")
	if err := p.SetStock(ctx, sku, 10, 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Redis.Del(context.Background(), lua.StockKey(sku), lua.HoldsKey(sku), lua.HoldEndsKey(sku))
	})
	id := "c-shape-" + testenv.RandomID("")
	in := workflows.Input{
		CheckoutID: id, CustomerID: "u-" + id, Items: []shop.CartLine{{SKU: sku, Quantity: 1}},
		PaymentTimeoutSeconds: 600, RequestID: "req-" + id, IdempotencyKey: id,
		Shape: workflows.NewestShape + 1,
	}
	run, err := p.Temporal.ExecuteWorkflow(ctx, workflows.StartOptions(in), workflows.Checkout, in)
	if err != nil {
		t.Fatalf("start checkout %s at shape %d: %v", id, in.Shape, err)
	}
	t.Cleanup(func() {
		// Nothing else ends it: no worker here knows its shape.
		if err := p.Temporal.TerminateWorkflow(context.Background(), run.GetID(), run.GetRunID(), "end of test"); err != nil {
			t.Errorf("terminate checkout %s: %v", id, err)
		}
	})

	// The first workflow task's outcome: failed, as wanted, or completed, when the worker ran
	// the saga (its commands are then in the history, e.g. the first activity).
	var outcome *historypb.HistoryEvent
	var events []*historypb.HistoryEvent
	eventually(t, fmt.Sprintf("the first workflow task of %s ends", id), func() (bool, string) {
		evs, err := history(ctx, p, run.GetID(), run.GetRunID())
		if err != nil {
			return false, err.Error()
		}
		events = evs
		for _, ev := range events {
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED, enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
				outcome = ev
				return true, ""
			}
		}
		return false, eventTypes(events)
	})
	failed := outcome.GetWorkflowTaskFailedEventAttributes()
	wantShape := fmt.Sprintf("saga shape %d", in.Shape)
	if failed == nil || !strings.Contains(failed.GetFailure().GetMessage(), wantShape) {
		t.Fatalf("a saga of shape %d on a worker whose newest is %d: its first workflow task ended %s %q, want failed naming %q; history: %s",
			in.Shape, workflows.NewestShape, outcome.GetEventType(), failed.GetFailure().GetMessage(), wantShape, eventTypes(events))
	}

	// Temporal retries the task, on the same worker here, which fails it again: the saga
	// stays running and waits. (The server records only the first failure in the history.)
	var status enumspb.WorkflowExecutionStatus
	var state string
	eventually(t, fmt.Sprintf("the workflow task of %s is retried", id), func() (bool, string) {
		d, err := p.Temporal.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
		if err != nil {
			return false, err.Error()
		}
		task := d.GetPendingWorkflowTask()
		status = d.GetWorkflowExecutionInfo().GetStatus()
		state = fmt.Sprintf("%s, pending workflow task %v", status, task)
		return status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || task.GetAttempt() >= 2, state
	})
	if status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the saga of an unknown shape is no longer running: %s", state)
	}

	if events, err = history(ctx, p, run.GetID(), run.GetRunID()); err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
			enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED, enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
		default: // an activity, a local activity's marker, a timer, an attribute upsert...
			t.Errorf("the saga of an unknown shape recorded event %d %s", ev.GetEventId(), ev.GetEventType())
		}
	}
	if _, err := p.Store.Checkout(ctx, id); !errors.Is(err, shop.ErrNotFound) {
		t.Errorf("read checkout %s from Postgres: %v, want no row", id, err)
	}
	holds, err := p.Stock.Holds(ctx, sku)
	if err != nil {
		t.Fatal(err)
	}
	if len(holds) != 0 {
		t.Errorf("%s is held in Redis: %+v, want no hold", sku, holds)
	}
}

// history is the events of one run of a workflow, oldest first.
func history(ctx context.Context, p *checkouttest.Product, workflowID, runID string) ([]*historypb.HistoryEvent, error) {
	iter := p.Temporal.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return nil, fmt.Errorf("read history of %s: %w", workflowID, err)
		}
		events = append(events, ev)
	}
	return events, nil
}

// eventTypes reads a history as its event types, in order.
func eventTypes(events []*historypb.HistoryEvent) string {
	names := make([]string, len(events))
	for i, ev := range events {
		names[i] = ev.GetEventType().String()
	}
	return strings.Join(names, ", ")
}
