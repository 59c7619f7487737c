package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// world is one seed's model of everything outside the saga: Redis holds per SKU, the
// checkout and order in Postgres, refunds started, and a log of what was delivered to the
// saga and what it was seen to do. The fakes below keep it; the checks read it.
type world struct {
	s   *schedule
	env *testsuite.TestWorkflowEnvironment

	mu    sync.Mutex // activities run on their own goroutines
	calls map[string]int
	phase string // what the saga was last seen doing, from the activities it called

	// Redis.
	available map[string]int64
	holds     map[string]holdState

	// Postgres.
	recorded bool
	pgStatus string // "open" or how the checkout ended
	order    *shop.Payment

	refunds []workflows.RefundInput
	// signalled are the payment event ids the saga was handed (its signal handler ran). A
	// payment the test environment never handed over because the workflow completed first
	// is one a real server would have refused to signal: the webhook handler then routes it
	// to a refund itself (disposition late_refund).
	signalled  map[string]bool
	deliveries []delivery
	seen       []observation
	expiries   []observation // expires_at as the saga showed it, over time
	trace      []string
	unexpected []string // activities the saga called that the explorer does not model

	reservationAnswered bool
	final               *shop.View
	runErr              error
}

type holdState string

const (
	holdNone      holdState = "never held"
	holdHeld      holdState = "held"
	holdReleased  holdState = "released"
	holdCommitted holdState = "committed"
)

// delivery is one thing that reached the saga from outside and may decide it.
type delivery struct {
	Seq          int
	At           time.Time
	What         string // "payment", "cancel update" (sent), "workflow cancellation"
	Accepted     bool   // a cancel update: the saga accepted it (a refused one decides nothing)
	Payment      shop.Payment
	Buffered     bool
	Source       string // the event's anchor
	Phase        string // what the saga was doing
	HoldsInPlace bool   // every SKU held in the model at that moment
}

// observation is the saga's state as seen from outside at one moment.
type observation struct {
	At     time.Time
	Status shop.Status
	Expiry time.Time
	Source string
}

func newWorld(s *schedule) *world {
	w := &world{s: s, calls: map[string]int{}, phase: "starting", available: map[string]int64{}, holds: map[string]holdState{}}
	for _, it := range s.Cart {
		w.available[it.SKU] = s.Stock[it.SKU]
		w.holds[it.SKU] = holdNone
	}
	return w
}

// nilActs names the real activity methods; it is never called.
var nilActs *activities.Activities

// fakeActivity pairs a real activity with its fake; both must have the same signature.
type fakeActivity struct{ real, fake any }

// fakeActivities is every activity the worker registers, with its fake. This is the table to
// extend when the saga gains an activity (ForfeitStock, say): one line here, and the model
// method it needs. TestExploreSagaInterleavings refuses to run while an activity the worker
// registers has no line, so a new activity cannot go unexplored by accident.
func (w *world) fakeActivities() []fakeActivity {
	return []fakeActivity{
		{nilActs.RecordCheckout, w.recordCheckout},
		{nilActs.ReserveStock, w.reserveStock},
		{nilActs.ReleaseStock, w.releaseStock},
		{nilActs.CommitStock, w.commitStock},
		{nilActs.ConfirmOrder, w.confirmOrder},
		{nilActs.RecordOutcome, w.recordOutcome},
		{nilActs.ForfeitStock, w.forfeitStock},
		{nilActs.VerifyPayment, w.verifyPayment},
		// Not called by Checkout today (Refund and the reconcilers call them): a call from the
		// saga is reported, so that whoever moves one into the saga models it here.
		{nilActs.RefundPayment, w.refundPayment},
		{nilActs.RecordRefund, w.recordRefund},
		{nilActs.FindSucceededPayment, w.findSucceededPayment},
		{nilActs.FindSucceededPayments, w.findSucceededPayments},
		{nilActs.ReadPaymentFates, w.readPaymentFates},
		{nilActs.ListWorkflowIDs, w.listWorkflowIDs},
		{nilActs.ListWorkflowPage, w.listWorkflowPage},
		{nilActs.ReconcileStock, w.reconcileStock},
		{nilActs.ClaimStaleOrphans, w.claimStaleOrphans},
		{nilActs.SettleCheckout, w.settleCheckout},
	}
}

// activityName is the name the SDK gives a method value: "RecordCheckout" for
// (*Activities).RecordCheckout, the name the worker registers it under.
func activityName(fn any) string {
	name := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
	name = strings.TrimSuffix(name, "-fm")
	return name[strings.LastIndex(name, ".")+1:]
}

// register puts every fake on the test environment under its activity's name, twice over: as
// a registered activity, which serves the saga's regular activities, and through an activity
// interceptor that answers every call of that name with the fake. The interceptor is what
// serves local activities: the test environment runs a local activity's own function value
// (here a method on a nil *Activities), and an interceptor runs in front of it. (A testify mock
// of the name would do too, but records a stack trace per call: a fifth of the explorer's
// time.) So the saga may run each step as a local or a regular activity, by function or by
// name, and change its mind, without touching the explorer.
func (w *world) register(env *testsuite.TestWorkflowEnvironment) error {
	fakes := map[string]reflect.Value{}
	for _, a := range w.fakeActivities() {
		name := activityName(a.real)
		if rt, ft := reflect.TypeOf(a.real), reflect.TypeOf(a.fake); rt != ft {
			return fmt.Errorf("the fake of %s is %v, the activity is %v", name, ft, rt)
		}
		env.RegisterActivityWithOptions(a.fake, activity.RegisterOptions{Name: name})
		fakes[name] = reflect.ValueOf(a.fake)
	}
	env.SetWorkerOptions(sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{&fakeInterceptor{fakes: fakes, w: w}}})
	return nil
}

// fakeInterceptor answers every activity call with the fake of the activity's name.
type fakeInterceptor struct {
	interceptor.WorkerInterceptorBase
	fakes map[string]reflect.Value
	w     *world
}

// InterceptWorkflow notes every payment signal the saga is handed (see world.signalled).
func (f *fakeInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &signalNoter{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, w: f.w}
}

type signalNoter struct {
	interceptor.WorkflowInboundInterceptorBase
	w *world
}

func (n *signalNoter) HandleSignal(ctx workflow.Context, in *interceptor.HandleSignalInput) error {
	var p shop.Payment
	if in.SignalName == workflows.SignalPayment && in.Arg != nil && converter.GetDefaultDataConverter().FromPayloads(in.Arg, &p) == nil {
		n.w.mu.Lock()
		if n.w.signalled == nil {
			n.w.signalled = map[string]bool{}
		}
		n.w.signalled[p.EventID] = true
		n.w.mu.Unlock()
	}
	return n.Next.HandleSignal(ctx, in)
}

func (f *fakeInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &fakeInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, fakes: f.fakes}
}

type fakeInbound struct {
	interceptor.ActivityInboundInterceptorBase
	fakes map[string]reflect.Value
}

func (i *fakeInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	fake, ok := i.fakes[activity.GetInfo(ctx).ActivityType.Name]
	if !ok {
		return i.Next.ExecuteActivity(ctx, in)
	}
	args := []reflect.Value{reflect.ValueOf(ctx)}
	for _, a := range in.Args {
		args = append(args, reflect.ValueOf(a))
	}
	out := fake.Call(args)
	err, _ := out[len(out)-1].Interface().(error)
	if len(out) == 1 {
		return nil, err
	}
	return out[0].Interface(), err
}

// The fakes of activities the saga does not call are named methods, not closures: the SDK
// names a registered function by its Go name, and every closure is "func1" to it.
func (w *world) refundPayment(context.Context, steps.RefundPaymentInput) (steps.RefundResult, error) {
	return steps.RefundResult{}, w.notModelled("RefundPayment")
}

func (w *world) recordRefund(context.Context, steps.RecordRefundInput) error {
	return w.notModelled("RecordRefund")
}

func (w *world) findSucceededPayment(context.Context, steps.FindPaymentInput) (*steps.FoundPayment, error) {
	return nil, w.notModelled("FindSucceededPayment")
}

func (w *world) findSucceededPayments(context.Context, steps.FindPaymentInput) ([]steps.FoundPayment, error) {
	return nil, w.notModelled("FindSucceededPayments")
}

func (w *world) readPaymentFates(context.Context, steps.PaymentFatesInput) (shop.PaymentFates, error) {
	return shop.PaymentFates{}, w.notModelled("ReadPaymentFates")
}

func (w *world) listWorkflowIDs(context.Context, steps.ListWorkflowsInput) ([]string, error) {
	return nil, w.notModelled("ListWorkflowIDs")
}

func (w *world) listWorkflowPage(context.Context, steps.ListWorkflowPageInput) (steps.WorkflowPage, error) {
	return steps.WorkflowPage{}, w.notModelled("ListWorkflowPage")
}

func (w *world) reconcileStock(context.Context, steps.ReconcileStockInput) (steps.ReconcileStockResult, error) {
	return steps.ReconcileStockResult{}, w.notModelled("ReconcileStock")
}

func (w *world) claimStaleOrphans(context.Context, steps.ClaimStaleOrphansInput) ([]shop.StaleOrphan, error) {
	return nil, w.notModelled("ClaimStaleOrphans")
}

func (w *world) settleCheckout(context.Context, steps.SettleCheckoutInput) (steps.SettleCheckoutResult, error) {
	return steps.SettleCheckoutResult{}, w.notModelled("SettleCheckout")
}

func (w *world) notModelled(name string) error {
	w.mu.Lock()
	w.unexpected = append(w.unexpected, name)
	w.mu.Unlock()
	return temporal.NewNonRetryableApplicationError("the explorer does not model "+name, "NotModelled", nil)
}

// step runs one call of a fake: it counts the call, fires the events anchored inside it, then
// applies the effect unless a fault says otherwise. apply runs under w.mu.
func (w *world) step(name, sku, phase string, apply func() error) error {
	w.mu.Lock()
	key := name
	if perSKU[name] {
		key += "(" + sku + ")"
	}
	w.calls[key]++
	call := w.calls[key]
	w.phase = phase
	var f *fault
	for i := range w.s.Faults {
		ff := &w.s.Faults[i]
		if ff.Activity == name && (ff.SKU == "" || ff.SKU == sku) && call >= ff.From && call <= ff.To {
			f = ff
			break
		}
	}
	w.mu.Unlock()

	// Events anchored in this call fire before its effect, for the cart's first SKU only, so
	// that each fires once whatever the order in which concurrent reserves run.
	if !perSKU[name] || sku == w.s.Cart[0].SKU {
		for _, e := range w.s.Events {
			if e.Anchor == inActivity && e.Activity == name && e.Call == call {
				w.fire(e, true)
			}
		}
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if f == nil {
		err := apply()
		w.logf("%s #%d -> %v", key, call, errOrOK(err))
		return err
	}
	var err error
	switch f.Kind {
	case transient:
		err = fmt.Errorf("%s: read tcp 127.0.0.1:6379: connection reset by peer", name)
	case lostReply:
		_ = apply()
		err = fmt.Errorf("%s: applied, then the reply was lost: i/o timeout", name)
	case timeout:
		if f.Applied {
			_ = apply()
		}
		err = temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, errors.New(name+": the attempt ran past its start-to-close timeout"))
	case permanent:
		err = temporal.NewNonRetryableApplicationError(name+": refused by the fault plan", f.ErrType, nil)
	}
	w.logf("%s #%d -> fault %s: %v", key, call, f.Kind, err)
	return err
}

func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func (w *world) recordCheckout(ctx context.Context, in steps.RecordCheckoutInput) (shop.CheckoutRecord, error) {
	var rec shop.CheckoutRecord
	err := w.step("RecordCheckout", "", "pricing", func() error {
		w.recorded = true
		if w.pgStatus == "" {
			w.pgStatus = shop.RecordOpen
		}
		rec = shop.CheckoutRecord{CheckoutID: in.CheckoutID, CustomerID: in.CustomerID, Status: w.pgStatus,
			Currency: "usd", Items: w.s.Cart, AmountCents: w.s.amount()}
		return nil
	})
	return rec, err
}

// reserveStock mirrors lua/reserve.lua: once per checkout, refused after the hold ended.
func (w *world) reserveStock(ctx context.Context, in steps.StockInput) (lua.ReserveResult, error) {
	var res lua.ReserveResult
	err := w.step("ReserveStock", in.SKU, "reserving", func() error {
		switch w.holds[in.SKU] {
		case holdReleased, holdCommitted:
			return temporal.NewNonRetryableApplicationError("hold ended", shop.ErrTypeHoldEnded, nil)
		case holdHeld:
			res = lua.ReserveResult{Held: in.Quantity, Available: w.available[in.SKU], AlreadyHeld: true}
			return nil
		}
		if w.available[in.SKU] < in.Quantity {
			return temporal.NewNonRetryableApplicationError("out of stock", shop.ErrTypeOutOfStock, nil,
				shop.Shortage{SKU: in.SKU, Requested: in.Quantity, Available: w.available[in.SKU]})
		}
		w.available[in.SKU] -= in.Quantity
		w.holds[in.SKU] = holdHeld
		res = lua.ReserveResult{Held: in.Quantity, Available: w.available[in.SKU]}
		return nil
	})
	return res, err
}

// releaseStock mirrors lua/release.lua: a no-op the second time, a tombstone when nothing was
// held, refused once committed.
func (w *world) releaseStock(ctx context.Context, in steps.StockInput) (int64, error) {
	return w.releaseHold("ReleaseStock", in, true)
}

// forfeitStock mirrors ForfeitStock: the hold ends as released, but its units do not return
// to available (Postgres refused the order for lack of them).
func (w *world) forfeitStock(ctx context.Context, in steps.StockInput) (int64, error) {
	return w.releaseHold("ForfeitStock", in, false)
}

// releaseHold mirrors release_hold in lua/common.lua, the one body of release.lua and
// forfeit.lua: the hold ends as released, its units go back to available only when giveBack.
func (w *world) releaseHold(activity string, in steps.StockInput, giveBack bool) (int64, error) {
	var released int64
	err := w.step(activity, in.SKU, "ending", func() error {
		switch w.holds[in.SKU] {
		case holdCommitted:
			return temporal.NewNonRetryableApplicationError("hold committed", shop.ErrTypeHoldCommitted, nil)
		case holdHeld:
			released = in.Quantity
			if giveBack {
				w.available[in.SKU] += in.Quantity
			}
		}
		w.holds[in.SKU] = holdReleased
		return nil
	})
	return released, err
}

// commitStock mirrors lua/commit.lua and CommitStock: refused once released; no hold is
// "nothing to do".
func (w *world) commitStock(ctx context.Context, in steps.StockInput) (int64, error) {
	var committed int64
	err := w.step("CommitStock", in.SKU, "confirming", func() error {
		switch w.holds[in.SKU] {
		case holdReleased:
			return temporal.NewNonRetryableApplicationError("hold released", shop.ErrTypeHoldReleased, nil)
		case holdHeld:
			committed = in.Quantity
			w.holds[in.SKU] = holdCommitted
		}
		return nil
	})
	return committed, err
}

// confirmOrder mirrors Store.confirmOrder: one order per checkout (a retry finds it), refused
// when the checkout already ended in Postgres.
func (w *world) confirmOrder(ctx context.Context, in steps.ConfirmOrderInput) (string, error) {
	err := w.step("ConfirmOrder", "", "confirming", func() error {
		switch {
		case w.order != nil:
			return nil
		case !w.recorded || w.pgStatus != shop.RecordOpen:
			return temporal.NewNonRetryableApplicationError("the checkout already ended without an order", shop.ErrTypeStockMismatch, nil)
		}
		w.order = &shop.Payment{Provider: in.PaymentProvider, PaymentRef: in.PaymentRef, AmountCents: in.AmountCents, Currency: in.Currency}
		w.pgStatus = string(shop.StatusConfirmed)
		return nil
	})
	if err != nil {
		return "", err
	}
	return shop.OrderID(in.CheckoutID), nil
}

// recordOutcome mirrors Store.RecordOutcomeOrEarlier: only the first end is kept, and an end
// recorded before is answered.
func (w *world) recordOutcome(ctx context.Context, in steps.RecordOutcomeInput) (*shop.CheckoutRecord, error) {
	var earlier *shop.CheckoutRecord
	err := w.step("RecordOutcome", "", "ending", func() error {
		switch {
		case w.recorded && w.pgStatus == shop.RecordOpen:
			w.pgStatus = in.Status
		case w.recorded:
			earlier = &shop.CheckoutRecord{CheckoutID: in.CheckoutID, Status: w.pgStatus}
			if w.order != nil {
				earlier.OrderID = shop.OrderID(in.CheckoutID)
				earlier.PaymentProvider, earlier.PaymentRef = w.order.Provider, w.order.PaymentRef
			}
		}
		return nil
	})
	return earlier, err
}

// verifyPayment mirrors Store.PaymentOutcomeVerified: every payment the explorer sends is one
// a verified webhook recorded (the stray signals have their own tests, unverified_test.go).
func (w *world) verifyPayment(ctx context.Context, in steps.VerifyPaymentInput) (bool, error) {
	return true, nil
}

// refund records a Refund child the saga started (the Refund workflow is tested on its own).
func (w *world) refund(in workflows.RefundInput) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refunds = append(w.refunds, in)
	w.logf("refund started for %s (%d %s): %s", in.PaymentRef, in.AmountCents, in.Currency, in.Reason)
}

// logf adds a line to the seed's trace; callers hold w.mu.
func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%-12v ", w.since())+fmt.Sprintf(format, args...))
}

func (w *world) since() time.Duration {
	if w.env == nil {
		return 0
	}
	return w.env.Now().Sub(w.s.Start)
}

func (w *world) holdsInPlace() bool {
	for _, st := range w.holds {
		if st != holdHeld {
			return false
		}
	}
	return true
}

// deliver records something that reached the saga, with what the model looked like then, and
// returns its index in w.deliveries.
func (w *world) deliver(d delivery) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	d.Seq, d.At, d.Phase, d.HoldsInPlace = len(w.deliveries)+1, w.env.Now(), w.phase, w.holdsInPlace()
	w.deliveries = append(w.deliveries, d)
	if d.What == "payment" {
		w.logf("deliver %s from %s (saga %s, holds in place %v)", describePayment(d.Payment, d.Buffered), d.Source, d.Phase, d.HoldsInPlace)
	} else {
		w.logf("deliver %s from %s (saga %s)", d.What, d.Source, d.Phase)
	}
	return len(w.deliveries) - 1
}

func describePayment(p shop.Payment, buffered bool) string {
	return (&event{Kind: evPay, Payment: p, Buffered: buffered}).String()
}

// observe records the saga's state as seen from outside (query, update answer, search
// attribute upsert, result).
func (w *world) observe(status shop.Status, expiresAt *time.Time, source string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o := observation{At: w.env.Now(), Status: status, Source: source}
	if expiresAt != nil {
		o.Expiry = *expiresAt
		if n := len(w.expiries); n == 0 || !w.expiries[n-1].Expiry.Equal(o.Expiry) {
			w.expiries = append(w.expiries, o)
		}
	}
	if status != "" {
		if n := len(w.seen); n == 0 || w.seen[n-1].Status != status {
			w.logf("saga is %s (%s)", status, source)
		}
		w.seen = append(w.seen, o)
	}
}

// fire makes one scheduled event happen. fromActivity is true on an activity's goroutine,
// where only the thread-safe parts of the test environment may be used.
func (w *world) fire(e *event, fromActivity bool) {
	if !fromActivity {
		if w.env.IsWorkflowCompleted() {
			return // the webhook would find the saga closed and route a payment to a refund itself
		}
		w.query("query before " + e.when())
	}
	if e.PayFirst != nil {
		w.deliver(delivery{What: "payment", Payment: *e.PayFirst, Buffered: true, Source: e.when() + ", right before the cancel"})
		w.env.SignalWorkflowSkippingWorkflowTask(workflows.SignalPayment, *e.PayFirst)
	}
	switch e.Kind {
	case evPay:
		w.deliver(delivery{What: "payment", Payment: e.Payment, Buffered: e.Buffered, Source: e.when()})
		// Buffering holds a payment for the next workflow task, to share it with the timer.
		// Once the saga is ending there may be no next task in this environment, which then
		// drops the signal when the workflow completes; a real server never does (it refuses
		// to complete a workflow while a signal is unseen, and the next task sees it).
		w.mu.Lock()
		ending := w.phase == "ending" // concurrent releases set the phase from their goroutines
		w.mu.Unlock()
		if e.Buffered && !ending {
			w.env.SignalWorkflowSkippingWorkflowTask(workflows.SignalPayment, e.Payment)
		} else {
			w.env.SignalWorkflow(workflows.SignalPayment, e.Payment)
		}
	case evCancelWorkflow:
		w.deliver(delivery{What: "workflow cancellation", Source: e.when()})
		w.env.CancelWorkflow()
	case evUpdate:
		if !fromActivity {
			w.update(e, func() {})
			return
		}
		// UpdateWorkflow is not safe off the test environment's main loop: post it there, and
		// hold this activity until the saga has accepted or refused the update, so that it
		// lands while the activity runs whatever the goroutines' timing.
		decided := make(chan struct{})
		w.env.RegisterDelayedCallback(func() { w.update(e, func() { close(decided) }) }, 0)
		select {
		case <-decided:
		case <-time.After(10 * time.Second):
			w.mu.Lock()
			w.logf("update %s sent from an activity was neither accepted nor refused", e.Update)
			w.mu.Unlock()
		}
	}
}

// update sends a support update; decided runs once it is accepted or refused (or cannot be
// sent because the saga completed).
func (w *world) update(e *event, decided func()) {
	if w.env.IsWorkflowCompleted() {
		decided()
		return
	}
	id := fmt.Sprintf("%s-%p", e.Update, e)
	// A cancel takes its place among the deliveries when it is sent, not when it is accepted:
	// the environment runs what it is sent in order, and an update starts a workflow task of
	// its own at once, so a payment sent after it reaches the saga after it, even though the
	// update's acceptance is reported later. Whether it was accepted is filled in then.
	cancel := -1
	if e.Update == workflows.UpdateCancel {
		cancel = w.deliver(delivery{What: "cancel update", Source: e.when()})
	}
	w.env.UpdateWorkflow(e.Update, id, &testsuite.TestUpdateCallback{
		OnAccept: func() {
			defer decided()
			w.mu.Lock()
			defer w.mu.Unlock()
			if cancel >= 0 {
				w.deliveries[cancel].Accepted = true
			}
			w.logf("update %s %+v accepted", e.Update, e.Arg)
		},
		OnReject: func(err error) {
			defer decided()
			w.mu.Lock()
			w.logf("update %s %+v refused: %v", e.Update, e.Arg, err)
			w.mu.Unlock()
		},
		OnComplete: func(v any, err error) {
			if view, ok := v.(shop.View); ok && err == nil {
				w.observe(view.Status, view.ExpiresAt, e.Update+" answer")
			}
		},
	}, e.Arg)
}

func (w *world) query(source string) {
	v, err := w.env.QueryWorkflow(workflows.QueryStatus)
	if err != nil {
		return
	}
	var view shop.View
	if v.Get(&view) == nil {
		w.observe(view.Status, view.ExpiresAt, source)
	}
}

// whenSettled wraps a timed event so that it runs once no activity is in flight. Activities
// take no workflow time, so a timed event should always come after the results of the
// activities started before it. The test environment skips time only while nothing runs; while
// an activity runs it fires the next timer on the wall clock instead, so on a loaded machine a
// timer a few milliseconds away fires before an activity's result, and the same seed plays out
// differently. It reads the environment's count of running activities (the very count that
// chooses between the two clocks) through reflection, since the SDK does not export it.
func (w *world) whenSettled(f func()) func() {
	var run func()
	run = func() {
		if running(w.env) > 0 {
			runtime.Gosched() // let the activity's goroutine post its result
			w.env.RegisterDelayedCallback(run, 0)
			return
		}
		f()
	}
	return run
}

func running(env *testsuite.TestWorkflowEnvironment) int64 {
	n := reflect.Indirect(reflect.ValueOf(env).Elem().FieldByName("impl")).FieldByName("runningCount")
	if !n.IsValid() {
		panic("the SDK's test environment no longer has impl.runningCount: see whenSettled")
	}
	return n.Int()
}

// errSeedStuck aborts a seed whose saga runs far longer than any checkout may.
var errSeedStuck = errors.New("the saga was still running 7 days after it started")
