package shop

import "slices"

// Payment is a verified payment event, as the webhook handler signals it to the saga.
type Payment struct {
	Provider    string      `json:"provider"`
	EventID     string      `json:"event_id"`
	Outcome     PaymentKind `json:"outcome"`
	PaymentRef  string      `json:"payment_ref"`
	AmountCents int64       `json:"amount_cents"`
	Currency    string      `json:"currency"`
}

// PaymentKind is what a payment event means for the checkout.
type PaymentKind string

// Payment outcomes.
const (
	PaymentSucceeded PaymentKind = "succeeded"
	// PaymentFailed is one failed attempt (a declined card); the buyer may still retry.
	PaymentFailed PaymentKind = "failed"
	// PaymentCanceled means the payment will not happen (the intent was canceled).
	PaymentCanceled PaymentKind = "canceled"
)

// PaymentEvent is one verified event from a payment provider, as the webhook handler
// records it.
type PaymentEvent struct {
	Provider    string
	EventID     string
	Type        string
	CheckoutID  string
	PaymentRef  string
	AmountCents int64
	Currency    string
	// Outcome is what the event means for the checkout (succeeded, failed, canceled); empty
	// for types the product ignores.
	Outcome string
	Payload []byte
}

// RecordedEvent says what Postgres already knew of an event.
type RecordedEvent struct {
	// New is true when this call recorded the event for the first time.
	New bool
	// Delivered is true when an earlier call already delivered the event to its saga.
	Delivered bool
}

// Event dispositions: what became of a recorded payment event.
const (
	DispositionSignalled = "signalled"   // delivered to a running saga
	DispositionIgnored   = "ignored"     // a type the product does not act on
	DispositionOrphan    = "orphan"      // no checkout has its id: support looks
	DispositionLate      = "late_refund" // its checkout already ended: to be refunded
	DispositionPending   = "pending"     // recorded, not yet delivered (the column's default)
	DispositionMatched   = "matched"     // an orphan handed to its checkout's saga when it was recorded
	// DispositionOrphanRefund: an orphan no checkout claimed in time, being refunded.
	DispositionOrphanRefund = "orphan_refund"
)

// StaleOrphan is a successful payment no checkout claimed in time: it must be refunded.
type StaleOrphan struct {
	RecordedPayment
	CheckoutID string `json:"checkout_id"`
}

// PaymentFates says which of a checkout's payments, as its provider lists them, Postgres has
// already given an end. Reconciliation hands only the others to the checkout's saga, and
// refunds only the others of a checkout that ended unpaid.
type PaymentFates struct {
	// Refunding are the payments routed to a refund: a refund is recorded for it, or its
	// webhook was (an orphan the sweep claimed, a payment after its checkout ended). The
	// provider may still list one as succeeded while its refund waits for support or has
	// not reached the provider.
	Refunding []string `json:"refunding,omitempty"`
	// Ordered is the payment of the checkout's order, if it is one of them.
	Ordered []string `json:"ordered,omitempty"`
}

// Decided reports whether Postgres gave payment ref an end: refunding, or paying the order.
func (f PaymentFates) Decided(ref string) bool {
	return slices.Contains(f.Refunding, ref) || slices.Contains(f.Ordered, ref)
}
