package workflows_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// A schedule is everything one seed of the explorer decided before the saga starts: the cart,
// the stock, what happens when (payments, support updates, a workflow cancellation) and which
// activity calls fail how. It is a pure function of the seed, so printing the seed is enough
// to replay a run; the schedule is printed too, so a reader sees the story without replaying.
type schedule struct {
	Seed           uint64
	Start          time.Time
	Cart           []shop.Item      // priced: the fake RecordCheckout answers these prices
	Stock          map[string]int64 // units available per SKU before the checkout
	TimeoutSeconds int64
	Events         []*event
	Faults         []fault
}

// anchor says when an event fires.
type anchor int

const (
	// atTime: At after the workflow starts (mock time).
	atTime anchor = iota
	// atExpiry: At relative to expires_at as the reservation answered it (negative is before).
	// Registered once the checkout awaits payment, because expires_at depends on how long the
	// reserves took (retries move it).
	atExpiry
	// inActivity: inside the Call-th call of Activity for the cart's first SKU (or the only
	// call, for activities not per SKU), before the fake applies its effect. This is how a
	// payment lands while the saga prices, reserves, releases, records or confirms.
	inActivity
)

type eventKind int

const (
	evPay eventKind = iota
	evUpdate
	evCancelWorkflow
)

type event struct {
	Anchor   anchor
	At       time.Duration
	Activity string
	Call     int

	Kind    eventKind
	Payment shop.Payment
	// Buffered delivers the payment signal without a workflow task of its own: the worker is
	// behind, so the signal is handled in the next task, together with whatever comes next (a
	// timer firing, an activity result, an update). This is how a payment and the payment timer
	// share one workflow task. (The test environment starts a task for every timer,
	// the explorer's own delayed events included, so the next timer of any kind ends the wait.)
	Buffered bool
	Update   string
	Arg      any
	// PayFirst, on a cancellation or a cancel update, is a payment acknowledged just before it
	// and handled in the same workflow task.
	PayFirst *shop.Payment
}

// faultKind is how one activity call fails.
type faultKind int

const (
	// transient: a dropped connection before anything happened; Temporal retries.
	transient faultKind = iota
	// lostReply: the effect happened, then the reply was lost; Temporal retries.
	lostReply
	// timeout: the attempt ran past its start-to-close timeout, with or without its effect.
	// The fake returns the error the SDK hands the workflow for that timeout instead of
	// blocking: a real wall-clock wait would cost seconds per seed, and the saga cannot tell
	// the two apart.
	timeout
	// permanent: a definite "no", a non-retryable application error of one of the types the
	// activities package defines.
	permanent
)

func (k faultKind) String() string {
	return [...]string{"transient", "lost-reply", "timeout", "permanent"}[k]
}

// fault makes calls From..To (counted per activity and SKU, from 1) of Activity fail.
type fault struct {
	Activity string
	SKU      string // "" matches every SKU (and activities that are not per SKU)
	From, To int
	Kind     faultKind
	Applied  bool   // timeout only: the effect happened before the timeout
	ErrType  string // permanent only
}

// permanentAnswers are the definite "no"s an activity may answer with, by activity. Release
// and commit have none here: theirs come from the model's tombstones, as the real scripts'
// do, because a random refusal would leave the model and the saga disagreeing about stock in
// a way no real Redis can.
var permanentAnswers = map[string][]string{
	"RecordCheckout": {shop.ErrTypeUnknownSKU, shop.ErrTypeMixedCurrency},
	"ReserveStock":   {shop.ErrTypeOverLimit, shop.ErrTypeNotStocked},
	"ConfirmOrder":   {shop.ErrTypeStockMismatch},
	"RecordOutcome":  {shop.ErrTypeInvalidRequest},
}

// sagaActivities are the activities the Checkout saga runs today, which faults and hooks aim
// at. Add a new one here (ForfeitStock, say) to have it faulted and hooked too.
var sagaActivities = []string{"RecordCheckout", "ReserveStock", "ReleaseStock", "RecordOutcome", "ConfirmOrder", "CommitStock", "ForfeitStock"}

// perSKU are the activities called once per SKU; their calls are counted per SKU.
var perSKU = map[string]bool{"ReserveStock": true, "ReleaseStock": true, "CommitStock": true, "ForfeitStock": true}

// generate builds the schedule of one seed.
func generate(seed uint64) *schedule {
	r := rand.New(rand.NewPCG(seed, 0x5a6a))
	pick := func(n int) int { return r.IntN(n) }
	chance := func(p float64) bool { return r.Float64() < p }

	s := &schedule{
		Seed: seed,
		// A fixed day, with a seed-chosen millisecond, so expires_at's rounding up to the
		// second is exercised and every run of a seed is the same. The day is far in the
		// future because the SDK turns a local activity's schedule-to-close (counted in
		// workflow time) into a wall-clock deadline: a start in the wall clock's past fails
		// every local activity at once, and differently from one run to the next.
		Start: time.Date(2099, 12, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(pick(1000)) * time.Millisecond),
		Stock: map[string]int64{},
	}
	skus := []string{"PHONE-X", "CASE-X", "CABLE-X"}
	prices := []int64{99_900, 1_500, 999}
	for i := range 1 + pick(3) {
		qty := int64(1 + pick(2))
		s.Cart = append(s.Cart, shop.Item{SKU: skus[i], Quantity: qty, UnitPriceCents: prices[pick(len(prices))]})
		s.Stock[skus[i]] = qty + int64(pick(3))
		if chance(0.08) {
			s.Stock[skus[i]] = qty - 1 // out of stock
		}
	}
	s.TimeoutSeconds = []int64{1, 5, 60, 300, 900, int64(1 + pick(1800))}[pick(6)]
	amount := s.amount()
	timeoutDur := time.Duration(s.TimeoutSeconds) * time.Second

	when := func(e *event) *event {
		switch x := r.Float64(); {
		case x < 0.45:
			// Anywhere from the start to a while after the deadline. Not at 0: a callback at
			// 0 may run before the saga's first workflow task, in an order that differs from
			// run to run; the earliest moments are covered by the events inside RecordCheckout.
			e.Anchor, e.At = atTime, time.Millisecond+time.Duration(r.Int64N(int64(timeoutDur*13/10)+1)).Truncate(time.Millisecond)
		case x < 0.75:
			e.Anchor = atExpiry
			e.At = []time.Duration{-10 * time.Second, -time.Second, -time.Millisecond, 0, time.Millisecond, 30 * time.Second}[pick(6)]
		default:
			e.Anchor, e.Activity, e.Call = inActivity, sagaActivities[pick(len(sagaActivities))], 1+pick(2)
		}
		return e
	}

	// Payments: the buyer's refs are pi_1 and pi_2 (a second card, a double charge); a wrong
	// amount or currency has a ref of its own. Repeats redeliver an earlier event (the same
	// event id) or find the same payment again (reconciliation: a new event id, the same ref).
	var sent []shop.Payment
	for i := range pick(5) {
		p := shop.Payment{Provider: "stripe", EventID: fmt.Sprintf("evt_%d", i+1),
			PaymentRef: fmt.Sprintf("pi_%d", 1+pick(2)), AmountCents: amount, Currency: "usd"}
		switch x := r.Float64(); {
		case x < 0.45:
			p.Outcome = shop.PaymentSucceeded
		case x < 0.60:
			p.Outcome, p.AmountCents, p.Currency = shop.PaymentFailed, 0, ""
		case x < 0.68:
			p.Outcome, p.AmountCents, p.Currency = shop.PaymentCanceled, 0, ""
		case x < 0.74:
			p.Outcome, p.PaymentRef, p.AmountCents = shop.PaymentSucceeded, fmt.Sprintf("pi_w%d", i+1), amount-1
		case x < 0.78:
			p.Outcome, p.PaymentRef, p.Currency = shop.PaymentSucceeded, fmt.Sprintf("pi_c%d", i+1), "EUR"
		case x < 0.90 && len(sent) > 0:
			p = sent[pick(len(sent))] // the same event delivered again
		case len(sent) > 0:
			p = sent[pick(len(sent))]
			p.EventID = "reconcile-" + p.PaymentRef // the same payment found by reconciliation
			if p.Outcome != shop.PaymentSucceeded {
				p.Outcome, p.AmountCents, p.Currency = shop.PaymentSucceeded, amount, "usd"
			}
		default:
			p.Outcome = shop.PaymentSucceeded
		}
		sent = append(sent, p)
		s.Events = append(s.Events, when(&event{Kind: evPay, Payment: p, Buffered: chance(0.3)}))
	}

	// Support updates, some of them invalid: refused updates are recorded, not errors.
	for range pick(4) {
		e := &event{Kind: evUpdate}
		switch pick(5) {
		case 0, 1:
			e.Update, e.Arg = workflows.UpdateExtend, workflows.ExtendRequest{Seconds: []int64{0, 30, 600, 3600, 86_400}[pick(5)]}
		case 2:
			e.Update, e.Arg = workflows.UpdateCancel, workflows.CancelRequest{By: []string{"customer", "support", "nobody"}[pick(3)]}
		case 3:
			e.Update, e.Arg = workflows.UpdateRetry, workflows.RetryRequest{}
		default:
			e.Update, e.Arg = workflows.UpdateAcknowledge, workflows.AcknowledgeRequest{}
		}
		s.Events = append(s.Events, when(e))
	}
	if chance(0.15) {
		s.Events = append(s.Events, when(&event{Kind: evCancelWorkflow}))
	}
	// The cancel race head on: a payment acknowledged just before a workflow cancellation
	// or a cancel update, and handled in the same workflow task.
	for i, e := range s.Events {
		isCancel := e.Kind == evCancelWorkflow || e.Kind == evUpdate && e.Update == workflows.UpdateCancel
		if isCancel && chance(0.5) {
			e.PayFirst = &shop.Payment{Provider: "stripe", EventID: fmt.Sprintf("evt_race%d", i), Outcome: shop.PaymentSucceeded,
				PaymentRef: fmt.Sprintf("pi_race%d", i), AmountCents: amount, Currency: "usd"}
		}
	}

	// Faults: each saga activity fails in about one seed out of three.
	for _, act := range sagaActivities {
		if !chance(0.3) {
			continue
		}
		f := fault{Activity: act, From: 1}
		if perSKU[act] && chance(0.5) {
			f.SKU = s.Cart[pick(len(s.Cart))].SKU
		}
		switch x := r.Float64(); {
		case x < 0.15 && len(permanentAnswers[act]) > 0:
			f.Kind, f.ErrType = permanent, permanentAnswers[act][pick(len(permanentAnswers[act]))]
			f.From = 1 + pick(2)
			f.To = f.From
		default:
			f.Kind = []faultKind{transient, transient, lostReply, timeout}[pick(4)]
			f.Applied = f.Kind == timeout && chance(0.5)
			// Long outages outlast the retry policies: 12 attempts, two more than the ending and
			// confirming steps get, make the step stuck and flagged (then retried every 5
			// minutes or on support's retry); 32 attempts outlast the 2-minute schedule-to-close
			// of recording and reserving (about 29 attempts with their backoff), which then
			// fail for good. Longer outages would only cost time per seed.
			long := 12
			if act == "RecordCheckout" || act == "ReserveStock" {
				long = 32
			}
			f.To = []int{1, 2, 3, long}[pick(4)]
		}
		s.Faults = append(s.Faults, f)
	}
	return s
}

func (s *schedule) amount() int64 {
	var cents int64
	for _, it := range s.Cart {
		cents += it.Quantity * it.UnitPriceCents
	}
	return cents
}

func (e *event) when() string {
	switch e.Anchor {
	case atExpiry:
		if e.At < 0 {
			return fmt.Sprintf("expires_at-%v", -e.At)
		}
		return fmt.Sprintf("expires_at+%v", e.At)
	case inActivity:
		return fmt.Sprintf("in %s #%d", e.Activity, e.Call)
	}
	return fmt.Sprintf("t+%v", e.At)
}

func (e *event) String() string {
	switch e.Kind {
	case evPay:
		p := e.Payment
		s := fmt.Sprintf("payment %s %s ref=%s", p.EventID, p.Outcome, p.PaymentRef)
		if p.Outcome == shop.PaymentSucceeded {
			s += fmt.Sprintf(" %d %s", p.AmountCents, p.Currency)
		}
		if e.Buffered {
			s += " (buffered: handled in the next workflow task)"
		}
		return s
	case evUpdate:
		return fmt.Sprintf("update %s %+v", e.Update, e.Arg) + e.payFirst()
	}
	return "workflow cancellation" + e.payFirst()
}

func (e *event) payFirst() string {
	if e.PayFirst == nil {
		return ""
	}
	return fmt.Sprintf(", right after payment %s succeeded ref=%s %d %s in the same workflow task",
		e.PayFirst.EventID, e.PayFirst.PaymentRef, e.PayFirst.AmountCents, e.PayFirst.Currency)
}

func (f fault) String() string {
	s := fmt.Sprintf("%s", f.Activity)
	if f.SKU != "" {
		s += "(" + f.SKU + ")"
	}
	s += fmt.Sprintf(" calls %d-%d: %s", f.From, f.To, f.Kind)
	if f.Kind == timeout && f.Applied {
		s += " after applying"
	}
	if f.ErrType != "" {
		s += " " + f.ErrType
	}
	return s
}

func (s *schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  start %s, payment window %d s, amount %d usd\n", s.Start.Format(time.RFC3339Nano), s.TimeoutSeconds, s.amount())
	for _, it := range s.Cart {
		fmt.Fprintf(&b, "  cart: %d x %s at %d (stock %d)\n", it.Quantity, it.SKU, it.UnitPriceCents, s.Stock[it.SKU])
	}
	for _, e := range s.Events {
		fmt.Fprintf(&b, "  at %-22s %s\n", e.when(), e)
	}
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "  fault: %s\n", f)
	}
	return b.String()
}
