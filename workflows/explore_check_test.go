package workflows_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
)

// violation is one broken promise of one seed.
type violation struct {
	Promise string // money, holds, states, confirm, postgres, run, explorer
	Case    string // for money and confirm: how the lost or unconfirmed payment met the saga's end
	Detail  string
}

func (v violation) key() string {
	if v.Case == "" {
		return v.Promise
	}
	return v.Promise + " " + v.Case
}

func (v violation) String() string { return "[" + v.key() + "] " + v.Detail }

// check reads the model and the observations of one finished run and lists every broken
// promise of the contract ("What the product promises", "Checkout states").
func (w *world) check() []violation {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []violation
	add := func(promise, kase, format string, args ...any) {
		out = append(out, violation{Promise: promise, Case: kase, Detail: fmt.Sprintf(format, args...)})
	}

	if w.runErr != nil {
		add("run", "", "%v", w.runErr)
	}
	for _, name := range w.unexpected {
		add("explorer", "", "the saga called %s, which the explorer does not model: give it a fake in fakeActivities", name)
	}
	if w.final == nil {
		if w.runErr == nil {
			add("run", "", "the workflow did not complete")
		}
		return out
	}
	final := w.final.Status
	if !w.reservationAnswered {
		add("run", "", "the reservation update never answered (the API's POST would hang)")
	}

	// Money is never kept by mistake: every successful payment delivered ends as exactly one
	// order or one refund.
	firstDelivery := map[string]delivery{}
	var refs []string
	for _, d := range w.deliveries {
		if d.What != "payment" || d.Payment.Outcome != shop.PaymentSucceeded {
			continue
		}
		if !w.signalled[d.Payment.EventID] {
			continue // never handed to the saga: the webhook handler refunds it (see world.signalled)
		}
		if _, ok := firstDelivery[d.Payment.PaymentRef]; !ok {
			firstDelivery[d.Payment.PaymentRef] = d
			refs = append(refs, d.Payment.PaymentRef)
		}
	}
	refunded := map[string]int{}
	for _, r := range w.refunds {
		refunded[r.PaymentRef]++
		if _, ok := firstDelivery[r.PaymentRef]; !ok {
			add("money", "", "a refund was started for %s, which was never paid", r.PaymentRef)
		}
	}
	if w.order != nil {
		if d, ok := firstDelivery[w.order.PaymentRef]; !ok {
			add("money", "", "the order names payment %q, which was never paid", w.order.PaymentRef)
		} else if !w.rightAmount(d.Payment) {
			add("money", "", "the order was confirmed with payment %s of %d %s", d.Payment.PaymentRef, d.Payment.AmountCents, d.Payment.Currency)
		}
	}
	for _, ref := range refs {
		d := firstDelivery[ref]
		ordered := w.order != nil && w.order.PaymentRef == ref
		switch {
		case ordered && refunded[ref] > 0:
			add("money", "", "payment %s is both the order and refunded", ref)
		case !ordered && refunded[ref] == 0:
			add("money", w.subCase(d), "payment %s (delivered %s at %v, saga %s) is kept: no order, no refund; the checkout ended %s (%s)",
				ref, d.Source, d.At.Sub(w.s.Start), d.Phase, final, deref(w.final.Reason))
		}
	}

	// Every hold ends exactly once: none is left unless confirmed, and a confirmed checkout's
	// holds are all committed. (The fakes keep the tombstones, so a hold cannot end twice;
	// ending the wrong way shows here.)
	for _, it := range w.s.Cart {
		st := w.holds[it.SKU]
		switch {
		case final == shop.StatusConfirmed && st != holdCommitted:
			add("holds", "", "the checkout is confirmed but its hold on %s is %s", it.SKU, st)
		case final != shop.StatusConfirmed && st == holdHeld:
			add("holds", "", "the checkout ended %s with %s still held", final, it.SKU)
		case final != shop.StatusConfirmed && st == holdCommitted:
			add("holds", "", "%s was committed (sold) although the checkout ended %s", it.SKU, final)
		}
	}

	// An end is final: Postgres answers the same end as the saga once Temporal forgot it.
	if w.recorded && !w.faulted("RecordOutcome", permanent) && w.pgStatus != string(final) {
		add("postgres", "", "Postgres says the checkout is %s, the saga ended %s", w.pgStatus, final)
	}

	// No state moves backwards, whoever looks (query, update answers, search attribute, result).
	for i := 1; i < len(w.seen); i++ {
		prev, cur := w.seen[i-1], w.seen[i]
		if rank(cur.Status) < rank(prev.Status) || prev.Status.Final() && cur.Status != prev.Status {
			add("states", "", "the state moved from %s (%s at %v) to %s (%s at %v)",
				prev.Status, prev.Source, prev.At.Sub(w.s.Start), cur.Status, cur.Source, cur.At.Sub(w.s.Start))
		}
	}

	// A 201 is a promise: a successful payment of the right amount delivered before expires_at
	// (as extended), with every hold in place and nothing earlier deciding the checkout, is
	// confirmed. A definite "no" from ConfirmOrder (Postgres disagrees) is exempt: the saga
	// refunds then.
	if final != shop.StatusConfirmed && !w.faulted("ConfirmOrder", permanent) {
		for _, d := range w.deliveries {
			if d.What == "cancel update" && !d.Accepted {
				continue // refused: it decided nothing
			}
			if d.What != "payment" {
				break // a cancel update accepted or a workflow cancellation decided it
			}
			p := d.Payment
			if p.Outcome == shop.PaymentCanceled {
				break // decided: payment_failed
			}
			if p.Outcome != shop.PaymentSucceeded || !w.rightAmount(p) {
				continue
			}
			expiry := w.expiryAt(d.At)
			if !d.HoldsInPlace || expiry.IsZero() || !d.At.Before(expiry) {
				continue
			}
			add("confirm", w.subCase(d), "payment %s was delivered %v before expires_at (%s, with every hold in place), yet the checkout ended %s (%s)",
				p.PaymentRef, expiry.Sub(d.At), d.Source, final, deref(w.final.Reason))
			break
		}
	}
	return out
}

func (w *world) rightAmount(p shop.Payment) bool {
	return p.AmountCents == w.s.amount() && strings.EqualFold(p.Currency, "usd")
}

// expiryAt is expires_at as the saga showed it at t (extensions included), zero before the
// checkout awaited payment.
func (w *world) expiryAt(t time.Time) time.Time {
	var e time.Time
	for _, o := range w.expiries {
		if o.At.After(t) {
			break
		}
		e = o.Expiry
	}
	return e
}

func (w *world) faulted(activity string, kind faultKind) bool {
	for _, f := range w.s.Faults {
		if f.Activity == activity && f.Kind == kind {
			return true
		}
	}
	return false
}

// subCase names the race a lost or unconfirmed payment looks like (with the timer, a cancel,
// pricing, reserving, the saga's end), from where it was delivered and how the checkout
// ended. It only labels the report.
func (w *world) subCase(d delivery) string {
	cancelled := false // a workflow cancellation reached the saga with or before the payment
	for _, x := range w.deliveries {
		if x.What == "workflow cancellation" && !x.At.After(d.At) {
			cancelled = true
		}
	}
	expiry := w.expiryAt(d.At)
	switch {
	case d.Phase == "pricing":
		return "(before pricing)"
	case d.Phase == "reserving":
		return "(while reserving)"
	case cancelled:
		return "(workflow cancellation)"
	case d.Buffered && d.Phase == "awaiting payment" && (w.final.Status == shop.StatusExpired || w.final.Status == shop.StatusPaymentFailed):
		return "(same task as the timer)"
	case d.Buffered && d.Phase == "awaiting payment" && w.final.Status == shop.StatusCancelled:
		return "(same task as a cancel update)"
	case d.Phase == "ending", !expiry.IsZero() && !d.At.Before(expiry):
		// At or after the deadline the saga is ending even before its first release runs.
		return "(while ending)"
	}
	return "(other)"
}

// rank orders the states as the contract does: reserving, awaiting_payment, confirming,
// then every end.
func rank(s shop.Status) int {
	switch s {
	case shop.StatusReserving:
		return 0
	case shop.StatusAwaitingPayment:
		return 1
	case shop.StatusConfirming:
		return 2
	}
	return 3
}
