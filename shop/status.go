package shop

// Status is a checkout's state. See docs/contract.md for the diagram.
type Status string

// The checkout states.
const (
	StatusReserving       Status = "reserving"
	StatusAwaitingPayment Status = "awaiting_payment"
	StatusConfirming      Status = "confirming"
	StatusConfirmed       Status = "confirmed"
	StatusOutOfStock      Status = "out_of_stock"
	StatusExpired         Status = "expired"
	StatusCancelled       Status = "cancelled"
	StatusPaymentFailed   Status = "payment_failed"
	StatusFailed          Status = "failed"
)

// Rank orders the states so that a state never moves backwards: every end ranks highest.
func (s Status) Rank() int {
	switch s {
	case StatusReserving:
		return 0
	case StatusAwaitingPayment:
		return 1
	case StatusConfirming:
		return 2
	default:
		return 3
	}
}

// Final reports whether s is an end state.
func (s Status) Final() bool { return s.Rank() == 3 }

// RecordOpen is the Postgres status of a checkout whose saga is still running; its live
// state is the saga's own (query it), Postgres only learns how it ended.
const RecordOpen = "open"

// Reject codes say why a checkout was refused at reservation, for the API's error body.
const (
	RejectOutOfStock    = "out_of_stock"
	RejectOverLimit     = "quantity_over_limit"
	RejectUnknownSKU    = "unknown_sku"
	RejectMixedCurrency = "mixed_currency"
	// RejectCustomerLimit: the cart would take the customer over a SKU's max_per_customer.
	RejectCustomerLimit = "customer_limit"
	// RejectTooManyOpen: the customer already has the most open checkouts allowed.
	RejectTooManyOpen = "too_many_open_checkouts"
)
