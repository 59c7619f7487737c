package workflows

import "github.com/checkout-saga/checkout-saga/shop"

// "Is the checkout decided?" is answered here and only here. The payment wait, the payment
// handling and the support updates each ask one of the questions below.

// decision is how far the checkout's end has been chosen. Later values win.
type decision int

const (
	// undecided: waiting (or still reserving); any event may still decide.
	undecided decision = iota
	// cancelAsked: a cancel update was accepted. A payment applied in the same workflow task
	// still wins: the money was taken while the units were held for the buyer.
	cancelAsked
	// paymentDecided: a payment paid the checkout, or the payment was canceled for good.
	paymentDecided
	// closing: the saga chose its end (confirming, ending, or adopting an earlier end).
	closing
)

func (c *checkout) decision() decision {
	switch {
	case c.closing:
		return closing
	case c.paid != nil || c.canceledPay != nil:
		return paymentDecided
	case c.cancelBy != "":
		return cancelAsked
	}
	return undecided
}

// decided reports whether the payment wait is over for a reason other than the timer.
func (c *checkout) decided() bool { return c.decision() != undecided }

// takesPayment reports whether a new payment can still pay the checkout: the holds are in
// place and neither a payment nor the saga has chosen the end. A cancel does not close it.
func (c *checkout) takesPayment() bool {
	return c.state == shop.StatusAwaitingPayment && c.decision() <= cancelAsked
}

// takesCancel reports whether a cancel still changes the checkout's end.
func (c *checkout) takesCancel() bool { return c.decision() == undecided }

// extendable reports whether support may still move the payment deadline.
func (c *checkout) extendable() bool { return c.state == shop.StatusAwaitingPayment && !c.decided() }

// paidFor reports whether money has paid the checkout: it can no longer be cancelled.
func (c *checkout) paidFor() bool {
	return c.paid != nil || c.state == shop.StatusConfirming || c.state == shop.StatusConfirmed
}
