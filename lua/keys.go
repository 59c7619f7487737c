package lua

import (
	"strings"
)

// The one place key names are built. Each carries the SKU as a {sku} hash
// tag so that all keys a script touches hash to the same Cluster slot;
// shop.ValidID keeps braces out of SKUs so the tag cannot be broken.

// StockKey is the hash holding a SKU's available, held and max_per_order.
func StockKey(sku string) string { return "stock:{" + sku + "}" }

// HoldsKey is the hash of a SKU's live holds, checkout id -> quantity.
func HoldsKey(sku string) string { return "holds:{" + sku + "}" }

// HoldEndsKey is the hash of a SKU's hold-end markers: holder -> "released:<expiry>" or
// "committed:<expiry>" (a tombstone recording that the hold ended), or "rebuilt" (see
// common.lua). Its field ":layout" keeps it in existence (see doc.go, "Redis Cluster").
func HoldEndsKey(sku string) string { return "hold-ends:{" + sku + "}" }

// HoldEndOutcome reads a marker of HoldEndsKey: "released", "committed", "rebuilt", or ""
// for none.
func HoldEndOutcome(marker string) string {
	outcome, _, _ := strings.Cut(marker, ":")
	return outcome
}

// StartedKey marks a checkout whose saga the API has started (see Stock.MarkStarted). It
// belongs to no SKU, so it has no hash tag; only the gate's pipelined read touches it.
func StartedKey(checkoutID string) string { return "checkout-started:" + checkoutID }
