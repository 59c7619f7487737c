package steps

import "github.com/checkout-saga/checkout-saga/shop"

// ReconcileStockInput tunes a reconciliation run.
type ReconcileStockInput struct {
	// GraceSeconds: a hold whose checkout ended less than this long ago is left to its saga,
	// which is still releasing or committing it (default 300). A saga Temporal reports closed
	// will never act again: its checkout and holds are settled at once, whatever the grace.
	GraceSeconds int64 `json:"grace_seconds"`
}

// ReconcileStockResult is what a run found and did.
type ReconcileStockResult struct {
	SKUs        int      `json:"skus"`
	Corrections []string `json:"corrections"`
	Unexplained []string `json:"unexplained"`
	// Refunds are the successful payments of the checkouts this run ended (their saga closed
	// without an end), routed to refunds in Postgres: the workflow starts their refunds.
	Refunds []shop.StaleOrphan `json:"refunds,omitempty"`
}

// SettleCheckoutInput names the checkout whose saga a webhook found closed.
type SettleCheckoutInput struct {
	CheckoutID string `json:"checkout_id"`
}

// SettleCheckoutResult is what a settlement found and did.
type SettleCheckoutResult struct {
	// Saga is the saga's state as Temporal names it, lower-case ("completed"); "running"
	// settles nothing.
	Saga string `json:"saga"`
	// Ended: this settlement recorded the checkout's end.
	Ended       bool     `json:"ended"`
	Corrections []string `json:"corrections,omitempty"`
	Unexplained []string `json:"unexplained,omitempty"`
	// Refunds are the payments routed to refunds in Postgres: the caller starts them.
	Refunds []shop.StaleOrphan `json:"refunds,omitempty"`
}
