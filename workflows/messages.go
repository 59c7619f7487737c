package workflows

import "github.com/checkout-saga/checkout-saga/shop"

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

// ExtendRequest is the argument of the extend update.
type ExtendRequest struct {
	Seconds int64 `json:"seconds"`
}

// RetryRequest is the argument of the retry update.
type RetryRequest struct{}

// AcknowledgeRequest is the argument of the acknowledge update.
type AcknowledgeRequest struct{}

// ReservationRequest is the argument of the reservation update. RequestHash and
// IdempotencyKey are the request's (Input's): a request with another body is refused by the
// update's validator, so it never enters the history. An API older than them sends neither.
type ReservationRequest struct {
	RequestID      string `json:"request_id"`
	RequestHash    string `json:"request_hash,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Caller         string `json:"caller,omitempty"`
}

// ReservationResult answers the reservation update.
type ReservationResult struct {
	View shop.View `json:"view"`
	// Created is true when the request that sent this update is the one that started the saga.
	Created bool `json:"created"`
	// RequestHash is the fingerprint of the body that started the saga.
	RequestHash string `json:"request_hash"`
	// IdempotencyKey is the key of the request that started the saga.
	IdempotencyKey string `json:"idempotency_key"`
	// Caller is who sent the request that started the saga.
	Caller string `json:"caller,omitempty"`
	// RejectCode is set when the checkout was refused at reservation.
	RejectCode string `json:"reject_code,omitempty"`
}

// CancelRequest is the argument of the cancel update.
type CancelRequest struct {
	// By says who cancelled: "customer" or "support".
	By string `json:"by"`
}
