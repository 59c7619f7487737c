package shop

import "time"

// AuditReport is the outcome of one audit of the promises (package audit runs it; the API
// and the operator monitor present it).
type AuditReport struct {
	CheckedAt  time.Time        `json:"checked_at"`
	Checks     []string         `json:"checks"`
	Violations []AuditViolation `json:"violations"` // never null: [] when clean
	// Errors are checks that could not run (a store unreachable): such a report is not clean.
	Errors []AuditCheckError `json:"errors,omitempty"`
}

// Clean reports whether every check ran and found nothing.
func (r AuditReport) Clean() bool { return len(r.Violations) == 0 && len(r.Errors) == 0 }

// AuditViolation is one broken promise and the ids to act on it. Only the ids that apply are
// set.
type AuditViolation struct {
	Check  string `json:"check"`
	Detail string `json:"detail"` // a sentence: what is wrong, with the numbers
	AuditIDs
}

// AuditIDs name what a violation is about.
type AuditIDs struct {
	CheckoutID string   `json:"checkout_id,omitempty"`
	WorkflowID string   `json:"workflow_id,omitempty"`
	SKU        string   `json:"sku,omitempty"`
	OrderID    string   `json:"order_id,omitempty"`
	Provider   string   `json:"provider,omitempty"`
	PaymentRef string   `json:"payment_ref,omitempty"`
	EventIDs   []string `json:"event_ids,omitempty"`
	RefundKeys []string `json:"refund_keys,omitempty"`
}

// AuditCheckError is a check that could not run, and why.
type AuditCheckError struct {
	Check string `json:"check"`
	Error string `json:"error"`
}
