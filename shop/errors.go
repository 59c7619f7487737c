package shop

import "errors"

// Application error types: the saga raises them (as non-retryable Temporal application
// errors) and branches on them, and the API maps them to answers. Never branch on text.
const (
	// Refusals of a stock step or of pricing the cart.
	ErrTypeOutOfStock     = "OutOfStock"
	ErrTypeOverLimit      = "OverLimit"
	ErrTypeNotStocked     = "NotStocked"
	ErrTypeHoldEnded      = "HoldEnded"
	ErrTypeHoldCommitted  = "HoldCommitted"
	ErrTypeHoldReleased   = "HoldReleased"
	ErrTypeNoHold         = "NoHold"
	ErrTypeUnknownSKU     = "UnknownSKU"
	ErrTypeMixedCurrency  = "MixedCurrency"
	ErrTypeStockMismatch  = "StockMismatch"
	ErrTypeInvalidRequest = "InvalidRequest"
	// ErrTypeUnverifiedPayment: a payment no verified event recorded (a payment signal sent
	// to Temporal from anywhere but the product); it never confirms an order.
	ErrTypeUnverifiedPayment = "UnverifiedPayment"
	// ErrTypePaymentRefunded: a payment whose refund is recorded (store.ErrPaymentRefunded);
	// it never confirms an order.
	ErrTypePaymentRefunded = "PaymentRefunded"

	// Refusals of a refund.
	ErrTypeRefundRefused     = "RefundRefused"
	ErrTypeNoPaymentProvider = "NoPaymentProvider"
	// ErrTypePaymentKept: the payment paid an order, so it is not refunded (store.ErrPaymentKept).
	ErrTypePaymentKept = "PaymentKept"

	// Refused support updates.
	ErrTypeAlreadyPaid           = "AlreadyPaid"
	ErrTypeNotExtendable         = "NotExtendable"
	ErrTypeInvalidSupportRequest = "InvalidSupportRequest"
	ErrTypeNothingToRetry        = "NothingToRetry"

	// Refused reservation updates: a request for the cart with another body, under its key
	// (IdempotencyKeyReused) or another (CheckoutExists).
	ErrTypeCheckoutExists       = "CheckoutExists"
	ErrTypeIdempotencyKeyReused = "IdempotencyKeyReused"
)

// Errors the stores return and the API maps; test them with errors.Is.
var (
	// ErrNotFound is returned when a row the caller asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrVersionMismatch means a PUT's If-Match no longer names the SKU's current version.
	ErrVersionMismatch = errors.New("the sku changed since the given etag")
	// ErrIdempotencyKeyReused means an adjustment's Idempotency-Key was used with another body.
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with another request")
	// ErrOnHandBelowHeld means an operator tried to set on_hand lower than the units
	// currently held by open checkouts.
	ErrOnHandBelowHeld = errors.New("on hand below held")
	// ErrInsufficientStock means an adjustment would take more units than are not held.
	ErrInsufficientStock = errors.New("insufficient stock")
	// ErrUnstorableEvent means Postgres refused an event's data itself (a NUL character or
	// invalid UTF-8 in a text column, a lone surrogate or an out-of-range number in the jsonb
	// payload). Retrying cannot help.
	ErrUnstorableEvent = errors.New("event data cannot be stored")
)
