package activities

import (
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// The vocabulary's words under the names activities used before package shop held them.
// They are aliases (the same types and values), kept only for the users that still name
// them: the saga and its tests (workflows), the worker and e2e's cost test. Every other
// package, activities included, names package shop; drop an alias with its last user.
type (
	Item            = shop.Item
	Shortage        = shop.Shortage
	Product         = shop.Product
	CheckoutRecord  = shop.CheckoutRecord
	RecordedPayment = shop.RecordedPayment
	PaymentEvent    = shop.PaymentEvent
	InventoryView   = shop.InventoryView
)

// Error types of non-retryable activity failures (shop.ErrType...).
const (
	ErrTypeOutOfStock     = shop.ErrTypeOutOfStock
	ErrTypeOverLimit      = shop.ErrTypeOverLimit
	ErrTypeNotStocked     = shop.ErrTypeNotStocked
	ErrTypeHoldEnded      = shop.ErrTypeHoldEnded
	ErrTypeHoldCommitted  = shop.ErrTypeHoldCommitted
	ErrTypeHoldReleased   = shop.ErrTypeHoldReleased
	ErrTypeUnknownSKU     = shop.ErrTypeUnknownSKU
	ErrTypeMixedCurrency  = shop.ErrTypeMixedCurrency
	ErrTypeStockMismatch  = shop.ErrTypeStockMismatch
	ErrTypeInvalidRequest = shop.ErrTypeInvalidRequest
)

// StatusOpen is the Postgres status of a checkout whose saga still runs (shop.RecordOpen).
const StatusOpen = shop.RecordOpen

// Event dispositions (shop.Disposition...).
const (
	DispositionOrphan  = shop.DispositionOrphan
	DispositionMatched = shop.DispositionMatched
)

// OrderID is the id of a confirmed checkout's order (shop.OrderID).
func OrderID(checkoutID string) string { return shop.OrderID(checkoutID) }

// Names the saga and the worker use from before package store held them.
const (
	ReasonCustomerLimit = store.ReasonCustomerLimit
	ReasonTooManyOpen   = store.ReasonTooManyOpen
	DefaultPoolMaxConns = store.DefaultPoolMaxConns
)
