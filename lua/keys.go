package lua

// The one place key names are built. Each carries the SKU as a {sku} hash
// tag so that all keys a script touches hash to the same Cluster slot;
// ValidID keeps braces out of SKUs so the tag cannot be broken.

// StockKey is the hash holding a SKU's available, held and max_per_order.
func StockKey(sku string) string { return "stock:{" + sku + "}" }

// HoldsKey is the hash of a SKU's live holds, checkout id -> quantity.
func HoldsKey(sku string) string { return "holds:{" + sku + "}" }

// HoldEndKey is the tombstone recording that a checkout's hold on a SKU
// ended, as "released" or "committed".
func HoldEndKey(sku, checkoutID string) string {
	return "hold-end:{" + sku + "}:" + checkoutID
}

// StartedKey marks a checkout whose saga the API has started (see Stock.MarkStarted). It
// belongs to no SKU, so it has no hash tag; only the gate's pipelined read touches it.
func StartedKey(checkoutID string) string { return "checkout-started:" + checkoutID }

// maxIDLen bounds SKUs and checkout ids so keys stay short.
const maxIDLen = 64

// ValidID reports whether s can be used as a SKU or checkout id: 1 to 64
// characters of A-Z, a-z, 0-9, '.', '_' and '-'. Anything else (braces,
// colons, spaces) could break a key's hash tag or shape.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
