package shop

import (
	"strconv"
	"time"
)

// Product is one SKU's catalog row.
type Product struct {
	SKU    string `json:"sku"`
	OnHand int64  `json:"on_hand"`
	Sold   int64  `json:"sold"`
	SaleTerms
	// Version changes whenever any field above changes (a sale too); see ETag.
	Version int64 `json:"-"`
}

// SaleTerms are what an operator sets about how a SKU sells, beside its stock: the catalog
// row keeps them (Product) and the operators' view shows them (InventoryView). Embedded in
// both, their fields are the row's and the view's own, in JSON too.
type SaleTerms struct {
	PriceCents  int64  `json:"price_cents"`
	Currency    string `json:"currency"`
	MaxPerOrder int64  `json:"max_per_order"`
	// MaxPerCustomer is the units one customer may hold and buy across their open and
	// confirmed checkouts (0: no limit; omitted then).
	MaxPerCustomer int64 `json:"max_per_customer,omitempty"`
	// SaleStartsAt is the SKU's scheduled drop: nothing of it sells before (nil: on sale
	// now; omitted then).
	SaleStartsAt *time.Time `json:"sale_starts_at,omitempty"`
}

// CheckoutRecord is a checkout as Postgres knows it.
type CheckoutRecord struct {
	CheckoutID  string     `json:"checkout_id"`
	CustomerID  string     `json:"customer_id"`
	Status      string     `json:"status"` // RecordOpen or the Status it ended in
	Currency    string     `json:"currency"`
	AmountCents int64      `json:"amount_cents"`
	Items       []Item     `json:"items"`
	ExpiresAt   *time.Time `json:"expires_at"`
	Reason      string     `json:"reason"`
	OrderID     string     `json:"order_id"`
	// PaymentProvider and PaymentRef name the payment of the checkout's order, if it has one.
	PaymentProvider string     `json:"payment_provider,omitempty"`
	PaymentRef      string     `json:"payment_ref,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
	EndedAt         *time.Time `json:"ended_at"`
	// Payments are the payment events recorded for this checkout before the saga saw them
	// (orphans: the webhook came before the checkout existed). Only RecordCheckout fills it.
	Payments []RecordedPayment `json:"payments,omitempty"`
	// Fingerprint is the request that created the checkout (none for one recorded before
	// fingerprints were kept).
	Fingerprint
}

// RecordedPayment is a payment event as Postgres recorded it.
type RecordedPayment struct {
	Provider    string `json:"provider"`
	EventID     string `json:"event_id"`
	Outcome     string `json:"outcome"`
	PaymentRef  string `json:"payment_ref"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// IdempotencyClaim is the body an Idempotency-Key belongs to, within its caller's Scope.
type IdempotencyClaim struct {
	// Scope is the caller whose key it is (a client, a customer; "" when none is known): the
	// same key of two callers is two keys.
	Scope       string
	Key         string
	CartID      string
	RequestHash string
}

// InventoryView is one SKU as operators see it: Postgres's on_hand and sold beside Redis's
// available and held.
type InventoryView struct {
	SKU       string `json:"sku"`
	OnHand    int64  `json:"on_hand"`
	Available int64  `json:"available"`
	Held      int64  `json:"held"`
	Sold      int64  `json:"sold"`
	SaleTerms
	// ETag is the strong entity tag of the SKU's Postgres row (see ETag): sent as a header,
	// not in the body.
	ETag string `json:"-"`
}

// ETag is the strong entity tag of a SKU at a row version. The version changes whenever
// any field of the SKU changes, a sale's on_hand included (migration 003).
func ETag(version int64) string { return `"v` + strconv.FormatInt(version, 10) + `"` }

// Adjustment is a relative change of a SKU's on_hand.
type Adjustment struct {
	SKU    string `json:"sku"`
	Delta  int64  `json:"delta"`
	Reason string `json:"reason"`
	// IdempotencyKey, if set, makes a retry answer the first answer and change nothing.
	IdempotencyKey string `json:"-"`
}
