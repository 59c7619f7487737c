package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	activitypb "go.temporal.io/api/activity/v1"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

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

// Every action the Temporal Web UI offers on a checkout, pressed once on a checkout in each
// state support meets: a table of actions x states on one dev server. Afterwards, once the
// buyer and the provider did what they do (the buyer pays, the provider retries a webhook)
// and the product's repairs ran as their Schedules would, every promise holds for every case:
//   - every successful payment ends as its order or as exactly one refund; the first one, made
//     in time under the 201, is its order unless the action ended the checkout on purpose
//     (Terminate, Cancel, the cancel update, a verified canceled payment);
//   - no hold of an ended checkout remains in Redis;
//   - GET answers what Postgres records;
//   - the audit at grace 0 is clean.
//
// Temporal is driven with the SDK client and the WorkflowService calls the Web UI makes.
// The table it logs ("state | action | Temporal answered | left") is what each button does.
// The activity buttons are pressed where the UI shows them: on a checkout whose ending step
// (a regular activity) is pending, retrying while Postgres refuses it.
func TestEveryConsoleActionOnEveryCheckoutStateKeepsThePromises(t *testing.T) {
	t.Parallel()
	s := newPayStack(t)
	s.refuseEnds(t)
	run := testenv.RandomID("")
	// The API behind the proxy records a webhook and cannot reach Temporal: a verified payment
	// whose delivery to the saga is late. It stays cut while the cases act.
	s.proxy.Cut()

	var cases []*consoleCase
	for _, st := range consoleStates {
		for _, a := range consoleActions() {
			if a.activity && !st.ending {
				continue // the UI shows activity buttons only on a pending activity
			}
			cases = append(cases, &consoleCase{state: st, action: a,
				id: fmt.Sprintf("c-con-%s-%s-%s", run, st.short, a.short)})
		}
	}
	t.Run("act", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.state.name+"/"+c.action.name, func(t *testing.T) {
				t.Parallel()
				c.act(t, s)
			})
		}
	})
	s.proxy.Restore()
	if t.Failed() {
		return
	}

	// The product repairs what support left, as its Schedules would; then nothing of money or
	// stock may be left for a person.
	ctx := t.Context()
	auditor := audit.New(s.pool, testenv.Redis(t), s.temporal, audit.Options{Grace: -1})
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; ; i++ {
		runWorkflow[steps.ReconcileStockResult](t, s, fmt.Sprintf("con-reconcile-%d", i), workflows.ReconcileStock, steps.ReconcileStockInput{GraceSeconds: 1})
		runWorkflow[workflows.RefundOrphansResult](t, s, fmt.Sprintf("con-orphans-%d", i), workflows.RefundOrphans, workflows.RefundOrphansInput{OlderThanSeconds: 1})
		rep, err := auditor.Run(ctx)
		var open []string
		for _, v := range rep.Violations {
			if strings.HasPrefix(v.CheckoutID, "c-con-"+run) {
				open = append(open, v.CheckoutID+": "+v.Check+": "+v.Detail)
			}
		}
		if err == nil && len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after the repairs the audit still finds (error %v):\n  %s", err, strings.Join(open, "\n  "))
			break
		}
		time.Sleep(1100 * time.Millisecond) // past the reconciler's grace of 1 s
	}

	table := make([]string, len(cases)) // each case writes its own row
	t.Run("check", func(t *testing.T) {
		for i, c := range cases {
			t.Run(c.state.name+"/"+c.action.name, func(t *testing.T) {
				t.Parallel()
				table[i] = c.check(t, s)
			})
		}
	})
	t.Logf("state | action | Temporal answered | left\n%s", strings.Join(table, "\n"))
}

// consoleState is where a checkout is when support acts on it. Every state starts with a
// failed card attempt (a verified webhook), so that the saga has a workflow task after the
// reservation to reset to.
type consoleState struct {
	name, short string
	// paid: a verified payment was made before support acted; delivered: it reached the saga.
	paid, delivered bool
	// ending: the checkout was cancelled and its first ending step (the outcome record, a
	// regular activity) is retrying because Postgres refuses it; Postgres takes it again once
	// support acted.
	ending bool
}

var consoleStates = []consoleState{
	{name: "unpaid", short: "u"},
	{name: "paid-unconfirmed", short: "pu", paid: true},
	{name: "paid", short: "p", paid: true, delivered: true},
	{name: "ending, outcome record retrying", short: "e", ending: true},
}

// consoleAction is one button of the Web UI, with its input.
type consoleAction struct {
	name, short string
	// ends: the action ends an open checkout on purpose; a payment it meets is refunded.
	ends bool
	// activity: the button acts on the checkout's pending activity; leavesPaused: it leaves
	// that activity paused, so the checkout stays open, holding, until support unpauses it.
	activity, leavesPaused bool
	do                     func(t *testing.T, s *payStack, c *consoleCase) error
	// then, if set, is what support does next once the buyer and the provider acted (the
	// runbook's follow-up, e.g. unpause); the provider then retries every webhook again.
	then func(t *testing.T, s *payStack, c *consoleCase) error
}

// consoleCase is one action pressed on one checkout in one state, and what it met.
type consoleCase struct {
	state  consoleState
	action consoleAction
	id     string
	// answer is what Temporal answered the action: "" (taken) or the refusal.
	answer string
	// payments are the successful payments made for the checkout, in order.
	payments []string
	// retries are webhooks the provider sends again once support acted (late ones).
	retries [][]byte
	// activityID is the pending activity the activity buttons act on (ending state).
	activityID string
}

func consoleActions() []consoleAction {
	acts := []consoleAction{
		{name: "terminate", short: "term", ends: true, do: func(t *testing.T, s *payStack, c *consoleCase) error {
			return s.temporal.TerminateWorkflow(t.Context(), shop.WorkflowID(c.id), "", "support pressed Terminate")
		}},
		{name: "cancel", short: "wfcancel", ends: true, do: func(t *testing.T, s *payStack, c *consoleCase) error {
			return s.temporal.CancelWorkflow(t.Context(), shop.WorkflowID(c.id), "")
		}},
	}
	for _, point := range []resetPoint{resetFirst, resetAfterReservation, resetLast} {
		for _, reapply := range []bool{true, false} {
			name, short := "reset to "+string(point), "r"+string(point[:1])
			if reapply {
				name, short = name+" reapplying signals and updates", short+"a"
			} else {
				name, short = name+" reapplying nothing", short+"n"
			}
			acts = append(acts, consoleAction{name: name, short: short, do: func(t *testing.T, s *payStack, c *consoleCase) error {
				return s.reset(t, c.id, point, reapply)
			}})
		}
	}
	for _, outcome := range []shop.PaymentKind{shop.PaymentSucceeded, shop.PaymentFailed, shop.PaymentCanceled} {
		acts = append(acts, consoleAction{name: "signal a forged " + string(outcome) + " payment", short: "sf" + string(outcome[:1]),
			do: func(t *testing.T, s *payStack, c *consoleCase) error {
				return s.temporal.SignalWorkflow(t.Context(), shop.WorkflowID(c.id), "", workflows.SignalPayment, shop.Payment{Provider: "stripe",
					EventID: "evt_forged_" + c.id, Outcome: outcome, PaymentRef: "pi_forged_" + c.id, AmountCents: unitPrice, Currency: "usd"})
			}})
		// A real payment: the provider made it and its verified webhook is recorded, late to
		// reach the saga; support copies it from the provider's dashboard into a signal.
		acts = append(acts, consoleAction{name: "signal a real " + string(outcome) + " payment", short: "sr" + string(outcome[:1]),
			ends: outcome == shop.PaymentCanceled,
			do: func(t *testing.T, s *payStack, c *consoleCase) error {
				pi := c.latePayment(t, s, outcome)
				return s.temporal.SignalWorkflow(t.Context(), shop.WorkflowID(c.id), "", workflows.SignalPayment, shop.Payment{Provider: "stripe",
					EventID: "evt_support_" + c.id, Outcome: outcome, PaymentRef: pi, AmountCents: unitPrice, Currency: "usd"})
			}})
	}
	update := func(name string, arg any) func(t *testing.T, s *payStack, c *consoleCase) error {
		return func(t *testing.T, s *payStack, c *consoleCase) error {
			ctx, cancel := context.WithTimeout(t.Context(), settleWait)
			defer cancel()
			h, err := s.temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
				WorkflowID: shop.WorkflowID(c.id), UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
			})
			if err != nil {
				return err
			}
			return h.Get(ctx, nil)
		}
	}
	acts = append(acts,
		consoleAction{name: "update cancel", short: "ucancel", ends: true, do: update(workflows.UpdateCancel, workflows.CancelRequest{By: "support"})},
		consoleAction{name: "update extend", short: "uext", do: update(workflows.UpdateExtend, workflows.ExtendRequest{Seconds: 60})},
		consoleAction{name: "update retry", short: "uretry", do: update(workflows.UpdateRetry, workflows.RetryRequest{})},
		consoleAction{name: "update acknowledge", short: "uack", do: update(workflows.UpdateAcknowledge, workflows.AcknowledgeRequest{})},
		consoleAction{name: "update reservation", short: "ures", do: update(workflows.UpdateReservation, workflows.ReservationRequest{RequestID: "support"})},
	)
	return append(append(acts, workflowPauseActions()...), activityActions()...)
}

// workflowPauseActions are the Web UI's Pause and Unpause of the workflow (server 1.30+ with
// frontend.WorkflowPauseEnabled, which workflows.DevServerFlags sets). While the saga is
// paused the API answers it from Postgres and says so; support unpauses once the buyer and
// the provider acted, as the runbook says.
func workflowPauseActions() []consoleAction {
	pause := func(t *testing.T, s *payStack, c *consoleCase) error {
		_, err := s.temporal.WorkflowService().PauseWorkflowExecution(t.Context(), &workflowservice.PauseWorkflowExecutionRequest{
			Namespace: "default", WorkflowId: shop.WorkflowID(c.id), Identity: "support", Reason: "support pressed Pause",
			RequestId: testenv.RandomID("pause-"),
		})
		if err != nil {
			return err
		}
		// A paused saga answers no query: GET answers what Postgres records, and says so.
		st, _ := s.pgStatus(t, c.id)
		if v := s.view(t, c.id); !v.Paused || v.Status.Final() != ended(st) || ended(st) && string(v.Status) != st {
			t.Errorf("GET of a paused checkout answers %s (paused %v), Postgres records %s", v.Status, v.Paused, st)
		}
		return nil
	}
	unpause := func(t *testing.T, s *payStack, c *consoleCase) error {
		_, err := s.temporal.WorkflowService().UnpauseWorkflowExecution(t.Context(), &workflowservice.UnpauseWorkflowExecutionRequest{
			Namespace: "default", WorkflowId: shop.WorkflowID(c.id), Identity: "support", RequestId: testenv.RandomID("unpause-"),
		})
		return err
	}
	return []consoleAction{
		{name: "pause the workflow, unpause it later", short: "wfpause", do: pause, then: unpause},
		{name: "unpause the workflow", short: "wfunpause", do: unpause},
	}
}

// activityActions are the Web UI's buttons on a pending activity (Web UI 2.47+): Pause,
// Unpause, Reset and Update options, on the checkout's ending step.
func activityActions() []consoleAction {
	exec := func(c *consoleCase) *commonpb.WorkflowExecution {
		return &commonpb.WorkflowExecution{WorkflowId: shop.WorkflowID(c.id)}
	}
	pause := func(t *testing.T, s *payStack, c *consoleCase) error {
		_, err := s.temporal.WorkflowService().PauseActivity(t.Context(), &workflowservice.PauseActivityRequest{
			Namespace: "default", Execution: exec(c), Identity: "support", Reason: "support pressed Pause",
			Activity: &workflowservice.PauseActivityRequest_Id{Id: c.activityID},
		})
		return err
	}
	unpause := func(t *testing.T, s *payStack, c *consoleCase) error {
		_, err := s.temporal.WorkflowService().UnpauseActivity(t.Context(), &workflowservice.UnpauseActivityRequest{
			Namespace: "default", Execution: exec(c), Identity: "support",
			Activity: &workflowservice.UnpauseActivityRequest_Id{Id: c.activityID},
		})
		return err
	}
	update := func(opts *activitypb.ActivityOptions, paths ...string) func(t *testing.T, s *payStack, c *consoleCase) error {
		return func(t *testing.T, s *payStack, c *consoleCase) error {
			_, err := s.temporal.WorkflowService().UpdateActivityOptions(t.Context(), &workflowservice.UpdateActivityOptionsRequest{
				Namespace: "default", Execution: exec(c), Identity: "support",
				Activity:        &workflowservice.UpdateActivityOptionsRequest_Id{Id: c.activityID},
				ActivityOptions: opts, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths},
			})
			return err
		}
	}
	return []consoleAction{
		{name: "pause the activity, unpause it later", short: "apause", activity: true, do: pause, then: unpause},
		{name: "pause the activity", short: "apauseonly", activity: true, leavesPaused: true, do: pause},
		{name: "unpause the activity", short: "aunpause", activity: true, do: unpause},
		{name: "reset the activity", short: "areset", activity: true, do: func(t *testing.T, s *payStack, c *consoleCase) error {
			_, err := s.temporal.WorkflowService().ResetActivity(t.Context(), &workflowservice.ResetActivityRequest{
				Namespace: "default", Execution: exec(c), Identity: "support",
				Activity: &workflowservice.ResetActivityRequest_Id{Id: c.activityID},
			})
			return err
		}},
		{name: "update activity options: retry every second", short: "aretry1s", activity: true,
			do: update(&activitypb.ActivityOptions{RetryPolicy: &commonpb.RetryPolicy{InitialInterval: durationpb.New(time.Second), MaximumInterval: durationpb.New(time.Second)}},
				"retry_policy.initial_interval", "retry_policy.maximum_interval")},
		{name: "update activity options: one attempt", short: "aonce", activity: true,
			do: update(&activitypb.ActivityOptions{RetryPolicy: &commonpb.RetryPolicy{MaximumAttempts: 1}}, "retry_policy.maximum_attempts")},
	}
}

// refuseEnds makes this stack's Postgres refuse to record the end of a checkout listed in
// e2e_refused_ends, as an unreachable database would: the saga's outcome record fails and
// is retried until the checkout leaves the list.
func (s *payStack) refuseEnds(t *testing.T) {
	t.Helper()
	_, err := s.pool.Exec(t.Context(), `
		CREATE TABLE e2e_refused_ends (checkout_id text PRIMARY KEY);
		CREATE FUNCTION e2e_refuse_end() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF EXISTS (SELECT 1 FROM e2e_refused_ends WHERE checkout_id = NEW.checkout_id) THEN
				RAISE EXCEPTION 'the database refuses the end of checkout %', NEW.checkout_id;
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER e2e_refuse_end BEFORE UPDATE ON checkouts FOR EACH ROW
			WHEN (OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL) EXECUTE FUNCTION e2e_refuse_end();`)
	if err != nil {
		t.Fatalf("install the refusal of ends: %v", err)
	}
}

// endRetrying brings the checkout to the ending state: Postgres refuses its end, support's
// Cancel ends it, and its outcome record, the first ending step, fails and is retried. It
// returns the id of that pending activity.
func (s *payStack) endRetrying(t *testing.T, checkoutID string) string {
	t.Helper()
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO e2e_refused_ends VALUES ($1)`, checkoutID); err != nil {
		t.Fatal(err)
	}
	if err := s.temporal.CancelWorkflow(t.Context(), shop.WorkflowID(checkoutID), ""); err != nil {
		t.Fatal(err)
	}
	var id string
	eventually(t, "the outcome record retrying", func() (bool, string) {
		d, err := s.temporal.DescribeWorkflowExecution(t.Context(), shop.WorkflowID(checkoutID), "")
		if err != nil {
			return false, err.Error()
		}
		for _, a := range d.GetPendingActivities() {
			if a.GetActivityType().GetName() == steps.RecordOutcome && a.GetAttempt() >= 2 {
				id = a.GetActivityId()
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pending activities", len(d.GetPendingActivities()))
	})
	return id
}

// acceptEnds lets Postgres record the checkout's end again.
func (s *payStack) acceptEnds(t *testing.T, checkoutID string) {
	t.Helper()
	if _, err := s.pool.Exec(context.WithoutCancel(t.Context()), `DELETE FROM e2e_refused_ends WHERE checkout_id = $1`, checkoutID); err != nil {
		t.Error(err)
	}
}

// latePayment makes a payment of the outcome at the provider for the checkout and sends its
// webhook through the API that cannot reach Temporal: recorded as verified, not delivered.
// The provider sends it again once support acted. It returns the payment's id. A buyer who
// paid already does not pay again: a successful payment is the one they made.
func (c *consoleCase) latePayment(t *testing.T, s *payStack, outcome shop.PaymentKind) string {
	t.Helper()
	if outcome == shop.PaymentSucceeded && len(c.payments) > 0 {
		return c.payments[0]
	}
	intent := map[shop.PaymentKind]struct{ status, event string }{
		shop.PaymentSucceeded: {"succeeded", "payment_intent.succeeded"},
		shop.PaymentFailed:    {"requires_payment_method", "payment_intent.payment_failed"},
		shop.PaymentCanceled:  {"canceled", "payment_intent.canceled"},
	}[outcome]
	status, typ := intent.status, intent.event
	pi := s.fake.AddIntent(c.id, status, unitPrice, "usd")
	ev := stripeEvent(fmt.Sprintf("evt_late_%d_%s", len(c.retries), c.id), typ, c.id, pi, unitPrice)
	if code, st := s.sendStripe(t, s.cutAPI, ev); code != 503 {
		t.Fatalf("a webhook through the API that cannot reach Temporal answered %d %s, want 503", code, st)
	}
	if outcome == shop.PaymentSucceeded {
		c.payments = append(c.payments, pi)
	}
	c.retries = append(c.retries, ev)
	return pi
}

// act brings the checkout to its state, presses the action, and lets the buyer and the
// provider do what they do next: the provider retries the webhooks that were late, and a
// buyer who has not paid yet pays.
func (c *consoleCase) act(t *testing.T, s *payStack) {
	s.openCheckout(t, c.id, 600)
	failed := s.fake.AddIntent(c.id, "requires_payment_method", unitPrice, "usd")
	s.sendStripe(t, s.api, stripeEvent("evt_f_"+c.id, "payment_intent.payment_failed", c.id, failed, unitPrice))
	eventually(t, "a workflow task after the failed card", func() (bool, string) {
		return s.taskAfterSignal(t, c.id, 1) != 0, "none yet"
	})
	switch {
	case c.state.delivered:
		pi := s.fake.AddIntent(c.id, "succeeded", unitPrice, "usd")
		c.payments = append(c.payments, pi)
		s.sendStripe(t, s.api, stripeEvent("evt_s_"+c.id, "payment_intent.succeeded", c.id, pi, unitPrice))
		eventually(t, "the checkout confirmed", func() (bool, string) {
			st, orders := s.pgStatus(t, c.id)
			return st == string(shop.StatusConfirmed) && orders == 1, st
		})
		s.waitClosed(t, c.id)
	case c.state.paid:
		c.latePayment(t, s, shop.PaymentSucceeded)
	case c.state.ending:
		c.activityID = s.endRetrying(t, c.id)
	}

	if err := c.action.do(t, s, c); err != nil {
		c.answer = err.Error()
	}
	if c.state.ending {
		s.acceptEnds(t, c.id) // the database is back
	}

	for _, ev := range c.retries {
		s.sendStripe(t, s.api, ev)
	}
	if len(c.payments) == 0 {
		pi := s.fake.AddIntent(c.id, "succeeded", unitPrice, "usd")
		c.payments = append(c.payments, pi)
		ev := stripeEvent("evt_pay_"+c.id, "payment_intent.succeeded", c.id, pi, unitPrice)
		c.retries = append(c.retries, ev)
		s.sendStripe(t, s.api, ev)
	}
	if c.action.then != nil && c.answer == "" {
		if err := c.action.then(t, s, c); err != nil {
			c.answer = "then refused: " + err.Error()
		}
		for _, ev := range c.retries { // the provider retries what was not taken
			s.sendStripe(t, s.api, ev)
		}
	}
}

// check holds the case to the promises once the repairs ran, and returns its row of the table.
func (c *consoleCase) check(t *testing.T, s *payStack) string {
	ctx := t.Context()
	var left []string
	for i, pi := range c.payments {
		// The first payment was made in time under the 201: it is the order, unless the
		// action ended the checkout on purpose (before a payment that was late to reach it).
		// A payment made after the checkout ended (the ending state) is refunded.
		promised := i == 0 && (c.state.delivered || !c.action.ends) && !c.state.ending
		want := "one order or one refund"
		if promised {
			want = "its order"
		}
		var orders int
		eventually(t, fmt.Sprintf("payment %s (%d of %d) ends as %s", pi, i+1, len(c.payments), want), func() (bool, string) {
			if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE payment_ref = $1`, pi).Scan(&orders); err != nil {
				return false, err.Error()
			}
			got := fmt.Sprintf("%d orders, %d refunds", orders, s.refundsOf(pi))
			if promised {
				return orders == 1 && s.refundsOf(pi) == 0, got
			}
			return orders+s.refundsOf(pi) == 1, got
		})
		if orders == 1 {
			left = append(left, fmt.Sprintf("payment %d: order", i+1))
		} else {
			left = append(left, fmt.Sprintf("payment %d: refunded", i+1))
		}
	}
	st, orders := s.pgStatus(t, c.id)
	final := ended(st)
	switch {
	case !final && !c.action.leavesPaused:
		t.Errorf("the checkout is still %q in Postgres after the repairs", st)
	case !final && c.answer == "":
		// Its ending step waits for support, who find it by the runbook's query.
		s.listedAsPaused(t, c.id)
	}
	if final && s.holds(t, c.id) {
		t.Errorf("the checkout ended %s in Postgres and still holds %s", st, s.sku)
	}
	v := s.view(t, c.id)
	switch {
	case final && (string(v.Status) != st || (v.OrderID != nil) != (orders == 1)):
		t.Errorf("GET answers %s (order %v) for a checkout Postgres records %s with %d orders", v.Status, v.OrderID, st, orders)
	case !final && v.Status.Final():
		t.Errorf("GET answers %s for a checkout Postgres records %s", v.Status, st)
	}
	// The buyer's retry of the POST is answered from the same record as GET.
	if code, out := s.post(t, s.api, "/v1/checkouts", s.checkoutBody(c.id, 600), nil); final && code == http.StatusOK && out["status"] != st {
		t.Errorf("a retried POST answers %v for a checkout Postgres records %s", out["status"], st)
	}
	answer := "taken"
	if c.answer != "" {
		answer = "refused: " + shortError(c.answer)
	}
	return fmt.Sprintf("%s | %s | %s | postgres %s, %d orders, GET %s; %s",
		c.state.name, c.action.name, answer, st, orders, v.Status, strings.Join(left, ", "))
}

// ended reports whether Postgres's status of a checkout is an end ("" is no record, and
// shop.RecordOpen one whose saga has not recorded its end).
func ended(st string) bool {
	return st != "" && st != shop.RecordOpen && shop.Status(st).Final()
}

// listedAsPaused checks that the runbook's list of paused checkouts (docs/support.md, query
// paused) finds the checkout.
func (s *payStack) listedAsPaused(t *testing.T, checkoutID string) {
	t.Helper()
	query := fmt.Sprintf(`WorkflowId = %q AND %s`, shop.WorkflowID(checkoutID), fill(t, runbookQueries(t), "paused"))
	eventually(t, "the checkout listed by "+query, func() (bool, string) {
		resp, err := s.temporal.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default", Query: query})
		if err != nil {
			return false, err.Error()
		}
		return len(resp.GetExecutions()) == 1, fmt.Sprintf("%d listed", len(resp.GetExecutions()))
	})
}

// shortError is the first clause of a Temporal error, for the table.
func shortError(s string) string {
	if i := strings.IndexAny(s, "(:"); i > 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// resetPoint is where the Web UI's Reset takes a saga back to.
type resetPoint string

const (
	resetFirst            resetPoint = "first task"
	resetAfterReservation resetPoint = "task after the reservation"
	resetLast             resetPoint = "last task"
)

// reset resets the checkout's current run to a workflow task, as the Web UI's Reset does:
// reapplying the signals and updates after it, or none of them.
func (s *payStack) reset(t *testing.T, checkoutID string, point resetPoint, reapply bool) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), settleWait)
	defer cancel()
	iter := s.temporal.GetWorkflowHistory(ctx, shop.WorkflowID(checkoutID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var tasks []int64 // WorkflowTaskCompleted events
	var afterReservation int64
	reserved := false
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return err
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			if strings.Contains(ev.String(), steps.ReserveStock) {
				reserved = true
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			tasks = append(tasks, ev.GetEventId())
			if reserved && afterReservation == 0 {
				afterReservation = ev.GetEventId()
			}
		}
	}
	var to int64
	switch point {
	case resetFirst:
		to = tasks[0]
	case resetAfterReservation:
		to = afterReservation
	case resetLast:
		to = tasks[len(tasks)-1]
	}
	if to == 0 {
		return errors.New("no such workflow task")
	}
	req := &workflowservice.ResetWorkflowExecutionRequest{
		Namespace: "default", WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: shop.WorkflowID(checkoutID)},
		Reason: "support pressed Reset", WorkflowTaskFinishEventId: to, RequestId: testenv.RandomID("reset-"),
	}
	if !reapply {
		req.ResetReapplyExcludeTypes = []enumspb.ResetReapplyExcludeType{enumspb.RESET_REAPPLY_EXCLUDE_TYPE_SIGNAL, enumspb.RESET_REAPPLY_EXCLUDE_TYPE_UPDATE}
	}
	_, err := s.temporal.ResetWorkflowExecution(ctx, req)
	return err
}

// waitClosed waits until the checkout's saga is closed.
func (s *payStack) waitClosed(t *testing.T, checkoutID string) {
	t.Helper()
	eventually(t, "the saga closed", func() (bool, string) {
		d, err := s.temporal.DescribeWorkflowExecution(t.Context(), shop.WorkflowID(checkoutID), "")
		if err != nil {
			return false, err.Error()
		}
		st := d.GetWorkflowExecutionInfo().GetStatus()
		return st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, st.String()
	})
}
