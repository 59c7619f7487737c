package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// The saga baseline is the checkout saga itself (workflows.Checkout, on a task queue of its
// own, started and paid as the API starts and pays it) whose activities do nothing: every
// command, marker, search-attribute upsert and payload of a confirmed one-line checkout,
// with no HTTP, Redis or Postgres behind them. Its CPU over the floor's is what Temporal
// charges for the saga's commands; a checkout's CPU over its own is the product's work.
const sagaQueue = "bench-saga"

var sagaBaseline = baseline{name: "Checkout", queue: sagaQueue, workflow: workflows.Checkout,
	register: func(w sdkworker.Worker) {
		for name, fn := range map[string]any{
			"RecordCheckout": func(_ context.Context, in steps.RecordCheckoutInput) (shop.CheckoutRecord, error) {
				rec := shop.CheckoutRecord{CheckoutID: in.CheckoutID, CustomerID: in.CustomerID, Status: shop.RecordOpen,
					Currency: "usd", CreatedAt: time.Now()}
				for _, it := range in.Items {
					rec.Items = append(rec.Items, shop.Item{SKU: it.SKU, Quantity: it.Quantity, UnitPriceCents: 1_999})
					rec.AmountCents += it.Quantity * 1_999
				}
				return rec, nil
			},
			"ReserveStock": func(_ context.Context, in steps.StockInput) (lua.ReserveResult, error) {
				return lua.ReserveResult{Held: in.Quantity, Available: 1_000}, nil
			},
			"VerifyPayment": func(_ context.Context, in steps.VerifyPaymentInput) (bool, error) { return true, nil },
			"ConfirmOrder": func(_ context.Context, in steps.ConfirmOrderInput) (string, error) {
				return shop.OrderID(in.CheckoutID), nil
			},
			"CommitStock": func(_ context.Context, in steps.StockInput) (int64, error) { return in.Quantity, nil },
		} {
			w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
		}
	},
	run: func(ctx context.Context, tc client.Client, id string, started func()) error {
		in := workflows.Input{CheckoutID: id, CustomerID: "u-" + id, Items: []shop.CartLine{{SKU: "SAGA-BASELINE", Quantity: 1}},
			PaymentTimeoutSeconds: 600, RequestID: "req-" + id, IdempotencyKey: id, Shape: workflows.NewestShape}
		opts := workflows.StartOptions(in)
		opts.TaskQueue = sagaQueue
		h, err := tc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
			StartWorkflowOperation: tc.NewWithStartWorkflowOperation(opts, workflows.Checkout, in),
			UpdateOptions:          workflows.ReservationUpdate(in)})
		var res workflows.ReservationResult
		if err == nil {
			err = h.Get(ctx, &res)
		}
		if err != nil {
			return fmt.Errorf("update-with-start saga %s: %w", id, err)
		}
		started()
		pay := shop.Payment{Provider: "stripe", EventID: "evt_" + id, Outcome: shop.PaymentSucceeded, PaymentRef: "pi_" + id,
			AmountCents: 1_999, Currency: "usd"}
		if err := tc.SignalWorkflow(ctx, opts.ID, "", workflows.SignalPayment, pay); err != nil {
			return fmt.Errorf("signal saga %s: %w", id, err)
		}
		var v shop.View
		if err := tc.GetWorkflow(ctx, opts.ID, "").Get(ctx, &v); err != nil {
			return fmt.Errorf("saga %s: %w", id, err)
		}
		if v.Status != shop.StatusConfirmed {
			return fmt.Errorf("saga %s ended %s, want confirmed", id, v.Status)
		}
		return nil
	}}
