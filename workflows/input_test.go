package workflows_test

import (
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// checkoutInput is a cart of the given SKUs, two units of the first and one of each other.
func checkoutInput(checkoutID string, timeoutSeconds int64, skus ...string) workflows.Input {
	in := workflows.Input{
		CheckoutID: checkoutID, CustomerID: "u-record", PaymentTimeoutSeconds: timeoutSeconds,
		RequestID: "req-" + checkoutID, RequestHash: "hash-" + checkoutID, IdempotencyKey: checkoutID,
	}
	for i, sku := range skus {
		quantity := int64(1)
		if i == 0 {
			quantity = 2
		}
		in.Items = append(in.Items, shop.CartLine{SKU: sku, Quantity: quantity})
	}
	return in
}

// deref reads an optional string of a view.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
