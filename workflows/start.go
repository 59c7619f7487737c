package workflows

import (
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/shop"
)

// StartOptions are how every checkout saga is started: by the API, by the history recorder
// and by the cost measurement alike, so the recorded histories are the API's. The conflict
// policy USE_EXISTING attaches a retried request to the running saga; the reuse policy
// REJECT_DUPLICATE refuses a second saga for a cart whose saga already finished.
func StartOptions(in Input) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       shop.WorkflowID(in.CheckoutID),
		TaskQueue:                TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes:    StartAttributes(in),
		StaticSummary:            "Checkout " + in.CheckoutID + ": " + itemList(in.Items),
		// Who started it and with what, so support reads the ticket without opening the
		// input payload. One line: Web UI 2.42.1 folds line breaks in details into spaces.
		StaticDetails: fmt.Sprintf("Customer: %s; items: %s; payment window: %d s",
			in.CustomerID, itemList(in.Items), in.PaymentTimeoutSeconds),
	}
}

// StartOperation starts a new checkout saga at the newest shape, with StartOptions: the
// start that update-with-start sends with ReservationUpdate.
func StartOperation(c client.Client, in Input) client.WithStartWorkflowOperation {
	in.Shape = NewestShape
	return c.NewWithStartWorkflowOperation(StartOptions(in), Checkout, in)
}

// ReservationUpdate is the reservation update sent with the start: its id is the request's,
// so a request retried by the client library is answered once.
func ReservationUpdate(in Input) client.UpdateWorkflowOptions {
	return client.UpdateWorkflowOptions{
		UpdateID:     in.RequestID,
		UpdateName:   UpdateReservation,
		Args:         []any{ReservationRequest{RequestID: in.RequestID, RequestHash: in.RequestHash, IdempotencyKey: in.IdempotencyKey, Caller: in.Caller}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	}
}

// itemList reads "2 x PHONE-X, 1 x CASE-X".
func itemList(items []shop.CartLine) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = fmt.Sprintf("%d x %s", it.Quantity, it.SKU)
	}
	return strings.Join(parts, ", ")
}
