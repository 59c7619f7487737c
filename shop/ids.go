package shop

// MaxIDLen bounds cart ids, customer ids, SKUs and client names, so Redis keys stay short.
const MaxIDLen = 64

// IDRule is ValidID's rule as a client reads it in a field error.
const IDRule = "must be 1 to 64 letters, digits, '-', '_' or '.', and not . or .."

// ValidID is the one syntax rule for every id the product accepts (cart, customer, SKU,
// client): 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'. Anything else (braces,
// colons, spaces) could break a Redis key's {sku} hash tag or shape. "." and ".." are path
// segments that browsers and curl resolve away (/v1/checkouts/.. is /v1/), so a checkout or
// SKU of that id could not be addressed.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLen || s == "." || s == ".." {
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

// WorkflowID is the id of the saga of a checkout: one saga per cart.
func WorkflowID(checkoutID string) string { return "checkout-" + checkoutID }

// OrderID is the id of the order a confirmed checkout creates: one order per checkout.
func OrderID(checkoutID string) string { return "ord-" + checkoutID }
