package e2e

import (
	"fmt"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// Support resets a confirmed saga to the workflow task after a failed card attempt, without
// reapplying signals (the Web UI offers it, and so does `temporal workflow reset
// --reapply-exclude Signal`). The new run never sees the successful payment, and its payment
// timer, started before the reset point, fires. Postgres holds the checkout confirmed with its
// order: the run adopts that end, releasing nothing, and the API answers it.
func TestAResetWithoutSignalsLeavesAConfirmedCheckoutConfirmed(t *testing.T) {
	t.Parallel()
	s := newPayStack(t)
	ctx := t.Context()
	id := s.openNew(t, "c-reset-", 6)
	failed := s.fake.AddIntent(id, "requires_payment_method", unitPrice, "usd")
	s.sendStripe(t, s.api, stripeEvent("evt_f_"+id, "payment_intent.payment_failed", id, failed, unitPrice))
	// The reset point: the workflow task completed after the failed card's signal, before the
	// successful payment is sent.
	var point int64
	eventually(t, "a workflow task after the failed card", func() (bool, string) {
		point = s.taskAfterSignal(t, id, 1)
		return point != 0, fmt.Sprintf("reset point %d", point)
	})
	pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
	s.sendStripe(t, s.api, stripeEvent("evt_s_"+id, "payment_intent.succeeded", id, pi, unitPrice))
	var v shop.View
	if err := s.temporal.GetWorkflow(ctx, shop.WorkflowID(id), "").Get(ctx, &v); err != nil {
		t.Fatal(err)
	}
	if v.Status != shop.StatusConfirmed {
		t.Fatalf("before the reset: saga %s, want confirmed", v.Status)
	}

	if _, err := s.temporal.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace: "default", WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: shop.WorkflowID(id)},
		Reason: "support pressed Reset", WorkflowTaskFinishEventId: point, RequestId: testenv.RandomID("reset-"),
		ResetReapplyType: enumspb.RESET_REAPPLY_TYPE_NONE,
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.temporal.GetWorkflow(ctx, shop.WorkflowID(id), "").Get(ctx, &v); err != nil {
		t.Fatal(err)
	}
	st, orders := s.pgStatus(t, id)
	got := s.view(t, id)
	if st != string(shop.StatusConfirmed) || orders != 1 {
		t.Fatalf("after the reset: postgres %s with %d orders, want confirmed with its order", st, orders)
	}
	if got.Status != shop.StatusConfirmed || got.OrderID == nil {
		t.Errorf("after the reset: GET answers %s (order %v) for a checkout Postgres holds as confirmed with its order", got.Status, got.OrderID)
	}
	if v.Status != shop.StatusConfirmed || v.OrderID == nil {
		t.Errorf("after the reset: the new run ended %s (order %v), want the confirmed end Postgres records", v.Status, v.OrderID)
	}
	if n := s.refundsOf(pi, failed); n != 0 {
		t.Errorf("%d refunds, want none", n)
	}
}

// taskAfterSignal returns the id of the first WorkflowTaskCompleted event after the n-th
// signal of the checkout's current run, or 0 while there is none.
func (s *payStack) taskAfterSignal(t *testing.T, checkoutID string, n int) int64 {
	t.Helper()
	iter := s.temporal.GetWorkflowHistory(t.Context(), shop.WorkflowID(checkoutID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	signals := 0
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			signals++
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			if signals == n {
				return ev.GetEventId()
			}
		}
	}
	return 0
}
