package workflows_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// A worker never runs a saga of a shape it does not know: an API newer than the worker
// started it, and the worker would take the old branches without the markers a newer worker
// replays. It fails the workflow task (a panic in workflow code), which Temporal retries, so a
// worker that knows the shape runs it; nothing is held or written meanwhile.
func TestAWorkerRefusesASagaOfANewerShape(t *testing.T) {
	f, phone, in := phoneCheckout(t, 1)
	in.Shape = workflows.NewestShape + 1
	var ran []string
	f.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		ran = append(ran, info.ActivityType.Name)
	})
	f.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		ran = append(ran, info.ActivityType.Name)
	})
	f.reserveAt(0, "req-1")

	f.env.ExecuteWorkflow(workflows.Checkout, in)

	var panicked *temporal.PanicError
	if err := f.env.GetWorkflowError(); !errors.As(err, &panicked) || !strings.Contains(err.Error(), "shape") {
		t.Fatalf("a saga of shape %d ran on a worker whose newest is %d: error %v, want its workflow task failed (a panic naming the shape)",
			in.Shape, workflows.NewestShape, err)
	}
	if len(ran) != 0 {
		t.Errorf("activities ran for a saga of an unknown shape: %v", ran)
	}
	if _, err := f.acts.Store.Checkout(t.Context(), in.CheckoutID); !errors.Is(err, shop.ErrNotFound) {
		t.Errorf("read checkout %s: %v, want not recorded", in.CheckoutID, err)
	}
	if lv := f.level(phone); lv.Held != 0 {
		t.Errorf("phone held %d, want 0", lv.Held)
	}
}
