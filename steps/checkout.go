package steps

import (
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
)

// RecordCheckoutInput is the cart as the client sent it.
type RecordCheckoutInput struct {
	CheckoutID string      `json:"checkout_id"`
	CustomerID string      `json:"customer_id"`
	Items      []shop.Item `json:"items"`
	// Creator is the fingerprint of the request that started the saga, kept with the record.
	Creator shop.Fingerprint `json:"creator,omitzero"`
}

// StockInput names one SKU of one checkout.
type StockInput struct {
	CheckoutID string `json:"checkout_id"`
	SKU        string `json:"sku"`
	Quantity   int64  `json:"quantity"`
	// Reason is why a hold is released (expired, cancelled, ...); used for metrics and logs.
	Reason string `json:"reason,omitempty"`
}

// ConfirmOrderInput is everything the order row needs.
type ConfirmOrderInput struct {
	CheckoutID      string      `json:"checkout_id"`
	CustomerID      string      `json:"customer_id"`
	Items           []shop.Item `json:"items"`
	AmountCents     int64       `json:"amount_cents"`
	Currency        string      `json:"currency"`
	PaymentProvider string      `json:"payment_provider"`
	PaymentRef      string      `json:"payment_ref"`
	// ExpiresAt is when the payment hold would have run out, kept for support.
	ExpiresAt *time.Time `json:"expires_at"`
}

// RecordOutcomeInput is how a checkout that was not confirmed ended.
type RecordOutcomeInput struct {
	CheckoutID string `json:"checkout_id"`
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	// ExpiresAt is when the payment hold ran out or would have (nil if never held).
	ExpiresAt *time.Time `json:"expires_at"`
}
