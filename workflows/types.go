package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/activities"
)

// TaskQueue is where checkout workflows and their activities run.
const TaskQueue = "checkout"

// Names of the saga's messages. The API and support tools use these.
const (
	// UpdateReservation answers once every SKU is held or the checkout was refused; the API
	// sends it with update-with-start so a POST gets the reservation outcome in one call.
	UpdateReservation = "reservation"
	// UpdateCancel ends an open checkout as cancelled and answers with the final view.
	UpdateCancel = "cancel"
	// SignalPayment delivers a verified payment event.
	SignalPayment = "payment"
	// QueryStatus returns the checkout view.
	QueryStatus = "status"
	// UpdateExtend moves the payment deadline later (support; bounded by MaxHold).
	UpdateExtend = "extend"
	// UpdateRetry retries a stuck step at once (support).
	UpdateRetry = "retry"
	// UpdateAcknowledge clears NeedsAttention once support has dealt with the cause.
	UpdateAcknowledge = "acknowledge"
)

// Error types of refused support updates; the API maps them to HTTP answers.
const (
	ErrTypeAlreadyPaid           = "AlreadyPaid"
	ErrTypeNotExtendable         = "NotExtendable"
	ErrTypeInvalidSupportRequest = "InvalidSupportRequest"
	ErrTypeNothingToRetry        = "NothingToRetry"
)

// ExtendRequest is the argument of the extend update.
type ExtendRequest struct {
	Seconds int64 `json:"seconds"`
}

// RetryRequest is the argument of the retry update.
type RetryRequest struct{}

// AcknowledgeRequest is the argument of the acknowledge update.
type AcknowledgeRequest struct{}

// WorkflowID is the id of the saga of a checkout: one saga per cart.
func WorkflowID(checkoutID string) string { return "checkout-" + checkoutID }

// Status is a checkout's state. See the contract for the diagram.
type Status string

// The checkout states.
const (
	StatusReserving       Status = "reserving"
	StatusAwaitingPayment Status = "awaiting_payment"
	StatusConfirming      Status = "confirming"
	StatusConfirmed       Status = "confirmed"
	StatusOutOfStock      Status = "out_of_stock"
	StatusExpired         Status = "expired"
	StatusCancelled       Status = "cancelled"
	StatusPaymentFailed   Status = "payment_failed"
	StatusFailed          Status = "failed"
)

// rank orders the states so that a state never moves backwards: every end ranks highest.
func (s Status) rank() int {
	switch s {
	case StatusReserving:
		return 0
	case StatusAwaitingPayment:
		return 1
	case StatusConfirming:
		return 2
	default:
		return 3
	}
}

// Final reports whether s is an end state.
func (s Status) Final() bool { return s.rank() == 3 }

// Input starts a checkout saga.
type Input struct {
	CheckoutID string `json:"checkout_id"`
	CustomerID string `json:"customer_id"`
	// Items are the cart's lines without prices: RecordCheckout prices them from the catalog.
	Items []CartLine `json:"items"`
	// PaymentTimeoutSeconds bounds the wait for payment; 0 means the default.
	PaymentTimeoutSeconds int64 `json:"payment_timeout_seconds"`
	// RequestID identifies the HTTP request that started the saga, so the API can tell the
	// request that created it (201) from a retry that attached to it (200).
	RequestID string `json:"request_id"`
	// RequestHash fingerprints the request body, so a reused idempotency key with a
	// different body is refused.
	RequestHash string `json:"request_hash"`
	// IdempotencyKey is the key the starting request carried (the cart id by default).
	IdempotencyKey string `json:"idempotency_key"`
}

// CartLine is one line of the cart as the client sent it. It has no price field: the UI shows
// the saga's input as it was started, and an `"unit_price_cents": 0` there, before
// RecordCheckout priced the cart, read as a free item. Histories recorded with that field
// still decode (encoding/json ignores it) and replay: the input is not a command.
type CartLine struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// unpriced is the cart as activities.Items, before RecordCheckout prices it.
func unpriced(lines []CartLine) []activities.Item {
	items := make([]activities.Item, len(lines))
	for i, l := range lines {
		items[i] = activities.Item{SKU: l.SKU, Quantity: l.Quantity}
	}
	return items
}

// View is the checkout as clients and support see it.
type View struct {
	CheckoutID     string                `json:"checkout_id"`
	WorkflowID     string                `json:"workflow_id"`
	Status         Status                `json:"status"`
	CustomerID     string                `json:"customer_id"`
	Currency       string                `json:"currency"`
	AmountCents    int64                 `json:"amount_cents"`
	Items          []activities.Item     `json:"items"`
	ExpiresAt      *time.Time            `json:"expires_at"`
	OrderID        *string               `json:"order_id"`
	Reason         *string               `json:"reason"`
	Shortages      []activities.Shortage `json:"shortages,omitempty"`
	NeedsAttention bool                  `json:"needs_attention"`
	// Attention says, while NeedsAttention is set by a stuck step, what is wrong and what to do.
	Attention string `json:"attention,omitempty"`
	// Refunds are the ids of the Refund workflows this checkout started.
	Refunds []string `json:"refunds,omitempty"`

	// RequestHash and IdempotencyKey identify the request that started the saga, so the
	// API can tell a retry from a reused key even after the saga finished. Not for clients.
	RequestHash    string `json:"request_hash,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// ViewFromRecord rebuilds a finished checkout's view from its Postgres record, for when
// Temporal no longer keeps its history.
func ViewFromRecord(rec activities.CheckoutRecord) View {
	v := View{
		CheckoutID: rec.CheckoutID, WorkflowID: WorkflowID(rec.CheckoutID), Status: Status(rec.Status),
		CustomerID: rec.CustomerID, Currency: rec.Currency, AmountCents: rec.AmountCents,
		Items: rec.Items, ExpiresAt: rec.ExpiresAt,
	}
	if rec.Status == activities.StatusOpen {
		// The saga is gone but never recorded an end: say so rather than guess.
		v.Status, v.NeedsAttention = StatusFailed, true
		v.Reason = ptr("the checkout's saga is no longer running and recorded no end; support must look")
	}
	if rec.OrderID != "" {
		v.OrderID = &rec.OrderID
	}
	if rec.Reason != "" {
		v.Reason = &rec.Reason
	}
	return v
}

// Reject codes say why a checkout was refused at reservation, for the API's error body.
const (
	RejectOutOfStock    = "out_of_stock"
	RejectOverLimit     = "quantity_over_limit"
	RejectUnknownSKU    = "unknown_sku"
	RejectMixedCurrency = "mixed_currency"
	// RejectCustomerLimit: the cart would take the customer over a SKU's max_per_customer.
	RejectCustomerLimit = "customer_limit"
	// RejectTooManyOpen: the customer already has the most open checkouts allowed.
	RejectTooManyOpen = "too_many_open_checkouts"
)

// ReservationRequest is the argument of the reservation update.
type ReservationRequest struct {
	RequestID string `json:"request_id"`
}

// ReservationResult answers the reservation update.
type ReservationResult struct {
	View View `json:"view"`
	// Created is true when the request that sent this update is the one that started the saga.
	Created bool `json:"created"`
	// RequestHash is the fingerprint of the body that started the saga.
	RequestHash string `json:"request_hash"`
	// IdempotencyKey is the key of the request that started the saga.
	IdempotencyKey string `json:"idempotency_key"`
	// RejectCode is set when the checkout was refused at reservation.
	RejectCode string `json:"reject_code,omitempty"`
}

// Payment is a verified payment event, as the webhook handler signals it.
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

// CancelRequest is the argument of the cancel update.
type CancelRequest struct {
	// By says who cancelled: "customer" or "support".
	By string `json:"by"`
}

// Search attributes, as the contract names them. They are registered by the project (dev
// server flags, `checkout setup-temporal`, docker-compose) and kept current by the saga.
var (
	AttrCheckoutState  = temporal.NewSearchAttributeKeyKeyword("CheckoutState")
	AttrCustomerID     = temporal.NewSearchAttributeKeyKeyword("CustomerId")
	AttrSkus           = temporal.NewSearchAttributeKeyKeywordList("Skus")
	AttrAmountCents    = temporal.NewSearchAttributeKeyInt64("AmountCents")
	AttrHoldExpiresAt  = temporal.NewSearchAttributeKeyTime("HoldExpiresAt")
	AttrNeedsAttention = temporal.NewSearchAttributeKeyBool("NeedsAttention")
)

// SearchAttributeTypes lists the contract's search attributes with their types, in the
// form `temporal server start-dev --search-attribute NAME=TYPE` and the operator API use.
var SearchAttributeTypes = map[string]string{
	"CheckoutState":  "Keyword",
	"CustomerId":     "Keyword",
	"Skus":           "KeywordList",
	"AmountCents":    "Int",
	"HoldExpiresAt":  "Datetime",
	"NeedsAttention": "Bool",
}

// StartAttributes are the search attributes a checkout starts with, so support finds it by
// customer and SKU from its first moment.
func StartAttributes(in Input) temporal.SearchAttributes {
	skus := make([]string, len(in.Items))
	for i, it := range in.Items {
		skus[i] = it.SKU
	}
	return temporal.NewSearchAttributes(
		AttrCheckoutState.ValueSet(string(StatusReserving)),
		AttrCustomerID.ValueSet(in.CustomerID),
		AttrSkus.ValueSet(skus),
		AttrNeedsAttention.ValueSet(false),
	)
}
