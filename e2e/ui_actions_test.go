package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/checkout-saga/checkout-saga/audit"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/workflows"
)

var uiSeed = flag.Uint64("ui.seed", 0, "seed of TestSupportActionsInTheWebUILeaveNoMoneyOrStockBehind (0: random)")

// Support can press anything in the Temporal Web UI, at any point of a sale: Terminate,
// Reset (reapplying signals or not), Cancel, and Signal (a payment of its own making). Each
// cart of this sale gets a random few of those, with and around real payments. Afterwards,
// once the product's own repair paths have run (the stock reconciler and the orphan sweep,
// as their Schedules would), every promise holds: the audit at grace 0 is clean (every
// payment one order or one refund, every order paid by verified money, no hold of an ended
// checkout, no open checkout without its saga), without a person.
//
// Replay a failure with -ui.seed=N (the seed is logged).
func TestSupportActionsInTheWebUILeaveNoMoneyOrStockBehind(t *testing.T) {
	t.Parallel()
	s := newPayStack(t)
	seed := *uiSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -ui.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ctx := t.Context()
	run := testenv.RandomID("")

	type cart struct {
		id      string
		intents []string
		actions []string
	}
	// promised reports whether pi was made in time under the 201 and nothing else could end
	// the checkout first: the cart's first payment, and support did nothing to it but send
	// payment signals of its own making, which change nothing. (A Terminate, a Cancel or a
	// Reset may end it before the payment confirms it: that payment is refunded once.)
	promised := func(c *cart, pi string) bool {
		return pi == c.intents[0] && !slices.ContainsFunc(c.actions, func(a string) bool { return a != "pay" && a != "signal a payment" })
	}
	var carts []*cart
	for i := range 10 {
		c := &cart{id: fmt.Sprintf("c-ui-%s-%d", run, i)}
		s.openCheckout(t, c.id, 600)
		carts = append(carts, c)
	}
	pay := func(c *cart) {
		pi := s.fake.AddIntent(c.id, "succeeded", unitPrice, "usd")
		c.intents = append(c.intents, pi)
		s.sendStripe(t, s.api, stripeEvent(fmt.Sprintf("evt_%s_%d", c.id, len(c.intents)), "payment_intent.succeeded", c.id, pi, unitPrice))
	}
	actions := map[string]func(c *cart){
		"pay": pay,
		"terminate": func(c *cart) {
			_ = s.temporal.TerminateWorkflow(ctx, shop.WorkflowID(c.id), "", "support pressed Terminate")
		},
		"cancel": func(c *cart) { _ = s.temporal.CancelWorkflow(ctx, shop.WorkflowID(c.id), "") },
		"reset":  func(c *cart) { s.resetToFirstTask(t, c.id, enumspb.RESET_REAPPLY_TYPE_SIGNAL) },
		"reset without signals": func(c *cart) {
			s.resetToFirstTask(t, c.id, enumspb.RESET_REAPPLY_TYPE_NONE)
		},
		"signal a payment": func(c *cart) {
			_ = s.temporal.SignalWorkflow(ctx, shop.WorkflowID(c.id), "", workflows.SignalPayment, shop.Payment{Provider: "stripe",
				EventID: "evt_forged_" + c.id, Outcome: shop.PaymentSucceeded, PaymentRef: "pi_forged_" + c.id, AmountCents: unitPrice, Currency: "usd"})
		},
	}
	names := []string{"pay", "terminate", "cancel", "reset", "reset without signals", "signal a payment"}
	for _, c := range carts {
		for range 1 + rng.IntN(3) {
			name := names[rng.IntN(len(names))]
			c.actions = append(c.actions, name)
			actions[name](c)
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		}
		if rng.IntN(2) == 0 { // a buyer who pays after whatever support did
			c.actions = append(c.actions, "pay")
			pay(c)
		}
		t.Logf("%s: %s", c.id, strings.Join(c.actions, ", "))
	}

	// The product repairs what support left, as its Schedules would: the stock reconciler
	// ends checkouts whose saga is gone and releases their holds, the sweep refunds their
	// payments. Then nothing of money or stock may be left for a person.
	auditor := audit.New(s.pool, testenv.Redis(t), s.temporal, audit.Options{Grace: -1})
	deadline := time.Now().Add(90 * time.Second)
	for i := 0; ; i++ {
		time.Sleep(1100 * time.Millisecond) // past the reconciler's grace of 1 s
		runWorkflow[steps.ReconcileStockResult](t, s, fmt.Sprintf("ui-reconcile-%d", i), workflows.ReconcileStock, steps.ReconcileStockInput{GraceSeconds: 1})
		runWorkflow[workflows.RefundOrphansResult](t, s, fmt.Sprintf("ui-orphans-%d", i), workflows.RefundOrphans, workflows.RefundOrphansInput{OlderThanSeconds: 1})
		rep, err := auditor.Run(ctx)
		var open []string
		for _, v := range rep.Violations {
			if strings.HasPrefix(v.CheckoutID, "c-ui-"+run) || strings.Contains(v.PaymentRef, run) {
				open = append(open, v.Check+": "+v.Detail)
			}
		}
		if err == nil && len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("seed %d: after the repairs the audit still finds (error %v):\n  %s", seed, err, strings.Join(open, "\n  "))
		}
	}
	// And at the provider: each real payment was kept for one order or refunded once (a
	// refund the audit counts by its row reaches the provider a moment later); a payment made
	// in time under the 201 is its order.
	for _, c := range carts {
		for _, pi := range c.intents {
			promised := promised(c, pi)
			want := "one order or one refund"
			if promised {
				want = "its order"
			}
			eventually(t, fmt.Sprintf("seed %d: %s (%s): payment %s ends as %s", seed, c.id, strings.Join(c.actions, ", "), pi, want),
				func() (bool, string) {
					var orders int
					if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE payment_ref = $1`, pi).Scan(&orders); err != nil {
						return false, err.Error()
					}
					if promised {
						return orders == 1 && s.refundsOf(pi) == 0, fmt.Sprintf("%d orders, %d refunds", orders, s.refundsOf(pi))
					}
					return orders+s.refundsOf(pi) == 1, fmt.Sprintf("%d orders, %d refunds", orders, s.refundsOf(pi))
				})
		}
	}
}

// resetToFirstTask resets a checkout's saga to its first workflow task, as the Web UI's Reset
// does, reapplying its signals or not.
func (s *payStack) resetToFirstTask(t *testing.T, checkoutID string, reapply enumspb.ResetReapplyType) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	iter := s.temporal.GetWorkflowHistory(ctx, shop.WorkflowID(checkoutID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			_, _ = s.temporal.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
				Namespace:                 "default",
				WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: shop.WorkflowID(checkoutID)},
				Reason:                    "support pressed Reset",
				WorkflowTaskFinishEventId: ev.GetEventId(),
				RequestId:                 testenv.RandomID("reset-"),
				ResetReapplyType:          reapply,
			})
			return
		}
	}
}
