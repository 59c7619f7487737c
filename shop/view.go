package shop

import "time"

// View is the checkout as clients and support see it: the saga's status query answers it,
// and ViewFromRecord rebuilds it for a finished checkout Temporal no longer keeps.
type View struct {
	CheckoutID     string     `json:"checkout_id"`
	WorkflowID     string     `json:"workflow_id"`
	Status         Status     `json:"status"`
	CustomerID     string     `json:"customer_id"`
	Currency       string     `json:"currency"`
	AmountCents    int64      `json:"amount_cents"`
	Items          []Item     `json:"items"`
	ExpiresAt      *time.Time `json:"expires_at"`
	OrderID        *string    `json:"order_id"`
	Reason         *string    `json:"reason"`
	Shortages      []Shortage `json:"shortages,omitempty"`
	NeedsAttention bool       `json:"needs_attention"`
	// Attention says, while NeedsAttention is set by a stuck step, what is wrong and what to do.
	Attention string `json:"attention,omitempty"`
	// Refunds are the ids of the Refund workflows this checkout started.
	Refunds []string `json:"refunds,omitempty"`

	// RequestHash and IdempotencyKey identify the request that started the saga, so the
	// API can tell a retry from a reused key even after the saga finished. Not for clients.
	RequestHash    string `json:"request_hash,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Caller is who sent that request (a client, a customer); "" for sagas older than it.
	Caller string `json:"caller,omitempty"`

	// Paused is set by the API, never by the saga: the saga is paused (support's Pause in the
	// Web UI), the server refuses its queries, and this view is Postgres's record of it.
	Paused bool `json:"-"`
}

// Creator is the fingerprint of the request that created the checkout.
func (v View) Creator() Fingerprint {
	return Fingerprint{RequestHash: v.RequestHash, IdempotencyKey: v.IdempotencyKey, Caller: v.Caller}
}

// ReasonUnsettled is the reason of a checkout Postgres has open whose saga is no longer
// running and recorded no end. Until it is settled (by the next payment webhook or stock
// reconciler run) its units may still be held, so its view never says they are not.
const ReasonUnsettled = "the checkout's saga stopped without recording an end; what it holds is being released and any payment refunded"

// ViewFromRecord rebuilds a finished checkout's view from its Postgres record, for when
// Temporal no longer keeps its history.
func ViewFromRecord(rec CheckoutRecord) View {
	v := View{
		CheckoutID: rec.CheckoutID, WorkflowID: WorkflowID(rec.CheckoutID), Status: Status(rec.Status),
		CustomerID: rec.CustomerID, Currency: rec.Currency, AmountCents: rec.AmountCents,
		Items: rec.Items, ExpiresAt: rec.ExpiresAt,
		RequestHash: rec.RequestHash, IdempotencyKey: rec.IdempotencyKey, Caller: rec.Caller,
	}
	if rec.Status == RecordOpen {
		// The saga is gone but never recorded an end: say so rather than guess.
		reason := ReasonUnsettled
		v.Status, v.NeedsAttention, v.Reason = StatusFailed, true, &reason
	}
	if rec.OrderID != "" {
		v.OrderID = &rec.OrderID
	}
	if rec.Reason != "" {
		v.Reason = &rec.Reason
	}
	return v
}
