package workflows

import (
	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/shop"
)

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

// SearchAttributes are the contract's search attributes, each key with its name and type: what
// the dev server flags, `checkout setup-temporal` and docker-compose register.
var SearchAttributes = []temporal.SearchAttributeKey{
	AttrCheckoutState, AttrCustomerID, AttrSkus, AttrAmountCents, AttrHoldExpiresAt, AttrNeedsAttention,
}

// StartAttributes are the search attributes a checkout starts with, so support finds it by
// customer and SKU from its first moment.
func StartAttributes(in Input) temporal.SearchAttributes {
	skus := make([]string, len(in.Items))
	for i, it := range in.Items {
		skus[i] = it.SKU
	}
	return temporal.NewSearchAttributes(
		AttrCheckoutState.ValueSet(string(shop.StatusReserving)),
		AttrCustomerID.ValueSet(in.CustomerID),
		AttrSkus.ValueSet(skus),
		AttrNeedsAttention.ValueSet(false),
	)
}
