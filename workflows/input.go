package workflows

import "github.com/checkout-saga/checkout-saga/shop"

// Input starts a checkout saga.
type Input struct {
	CheckoutID string `json:"checkout_id"`
	CustomerID string `json:"customer_id"`
	// Items are the cart's lines without prices: RecordCheckout prices them from the catalog.
	Items []shop.CartLine `json:"items"`
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
	// Caller is who sent the starting request (the API's callerScope: a client or a
	// customer, "" when neither authenticated): a request of another caller is not a retry.
	Caller string `json:"caller,omitempty"`
	// Shape is the saga's shape the starter asked for: StartOperation starts new sagas at
	// NewestShape. A saga started before shapes existed has 0 and asks workflow.GetVersion
	// as before (shapes.go).
	Shape int `json:"shape,omitempty"`
}
