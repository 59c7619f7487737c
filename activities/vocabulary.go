package activities

import (
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// The vocabulary's words under the names activities used before package shop held them.
// They are aliases (the same types and values), kept so the saga (workflows), its tests and
// the end-to-end suites compile unchanged while they move to naming package shop directly;
// new code names package shop.
type (
	Item             = shop.Item
	Shortage         = shop.Shortage
	Product          = shop.Product
	CheckoutRecord   = shop.CheckoutRecord
	RecordedPayment  = shop.RecordedPayment
	PaymentEvent     = shop.PaymentEvent
	RecordedEvent    = shop.RecordedEvent
	IdempotencyClaim = shop.IdempotencyClaim
	InventoryView    = shop.InventoryView
	Adjustment       = shop.Adjustment
)

// Error types of non-retryable activity failures (shop.ErrType...).
const (
	ErrTypeOutOfStock     = shop.ErrTypeOutOfStock
	ErrTypeOverLimit      = shop.ErrTypeOverLimit
	ErrTypeNotStocked     = shop.ErrTypeNotStocked
	ErrTypeHoldEnded      = shop.ErrTypeHoldEnded
	ErrTypeHoldCommitted  = shop.ErrTypeHoldCommitted
	ErrTypeHoldReleased   = shop.ErrTypeHoldReleased
	ErrTypeNoHold         = shop.ErrTypeNoHold
	ErrTypeUnknownSKU     = shop.ErrTypeUnknownSKU
	ErrTypeMixedCurrency  = shop.ErrTypeMixedCurrency
	ErrTypeStockMismatch  = shop.ErrTypeStockMismatch
	ErrTypeInvalidRequest = shop.ErrTypeInvalidRequest
)

// StatusOpen is the Postgres status of a checkout whose saga still runs (shop.RecordOpen).
const StatusOpen = shop.RecordOpen

// Event dispositions (shop.Disposition...).
const (
	DispositionSignalled    = shop.DispositionSignalled
	DispositionIgnored      = shop.DispositionIgnored
	DispositionOrphan       = shop.DispositionOrphan
	DispositionLate         = shop.DispositionLate
	DispositionPending      = shop.DispositionPending
	DispositionMatched      = shop.DispositionMatched
	DispositionOrphanRefund = shop.DispositionOrphanRefund
)

// The stores' errors (shop.Err...): the same values, so errors.Is matches either name.
var (
	ErrNotFound             = shop.ErrNotFound
	ErrVersionMismatch      = shop.ErrVersionMismatch
	ErrIdempotencyKeyReused = shop.ErrIdempotencyKeyReused
	ErrOnHandBelowHeld      = shop.ErrOnHandBelowHeld
	ErrInsufficientStock    = shop.ErrInsufficientStock
	ErrUnstorableEvent      = shop.ErrUnstorableEvent
)

// OrderID is the id of a confirmed checkout's order (shop.OrderID).
func OrderID(checkoutID string) string { return shop.OrderID(checkoutID) }

// ETag is the entity tag of a SKU at a row version (shop.ETag).
func ETag(version int64) string { return shop.ETag(version) }

// Names the saga and the worker use from before package store held them.
const (
	ReasonCustomerLimit = store.ReasonCustomerLimit
	ReasonTooManyOpen   = store.ReasonTooManyOpen
	DefaultPoolMaxConns = store.DefaultPoolMaxConns
)
