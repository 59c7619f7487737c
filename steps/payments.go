package steps

import "github.com/checkout-saga/checkout-saga/shop"

// RefundPaymentInput asks for one refund.
type RefundPaymentInput struct {
	Provider       string `json:"provider"`
	PaymentRef     string `json:"payment_ref"`
	AmountCents    int64  `json:"amount_cents"`
	Currency       string `json:"currency"`
	IdempotencyKey string `json:"idempotency_key"`
	Reason         string `json:"reason"`
}

// RefundResult is the provider's answer.
type RefundResult struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// VerifyPaymentInput names a payment event a checkout's saga was signalled.
type VerifyPaymentInput struct {
	CheckoutID string       `json:"checkout_id"`
	Payment    shop.Payment `json:"payment"`
}

// RecordRefundInput is a refund's state for Postgres.
type RecordRefundInput struct {
	ID               string `json:"id"`
	CheckoutID       string `json:"checkout_id"`
	Provider         string `json:"provider"`
	PaymentRef       string `json:"payment_ref"`
	AmountCents      int64  `json:"amount_cents"`
	Currency         string `json:"currency"`
	Reason           string `json:"reason"`
	Status           string `json:"status"`
	ProviderRefundID string `json:"provider_refund_id"`
}

// FindPaymentInput names a checkout to ask a provider about.
type FindPaymentInput struct {
	Provider   string `json:"provider"`
	CheckoutID string `json:"checkout_id"`
}

// FoundPayment is a succeeded payment the provider knows of.
type FoundPayment struct {
	Ref         string `json:"ref"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// PaymentFatesInput names payments a provider lists for one checkout.
type PaymentFatesInput struct {
	Provider   string   `json:"provider"`
	CheckoutID string   `json:"checkout_id"`
	Refs       []string `json:"refs"`
}

// ListWorkflowsInput is a visibility query.
type ListWorkflowsInput struct {
	Query string `json:"query"`
	Limit int    `json:"limit"`
}

// ListWorkflowPageInput asks for one page of a visibility query: the first when PageToken
// is empty, else the one after the page that returned it.
type ListWorkflowPageInput struct {
	Query     string `json:"query"`
	PageSize  int    `json:"page_size"`
	PageToken []byte `json:"page_token,omitempty"`
}

// WorkflowPage is one page of matching workflow ids; NextPageToken is empty on the last.
type WorkflowPage struct {
	IDs           []string `json:"ids"`
	NextPageToken []byte   `json:"next_page_token,omitempty"`
}

// ClaimStaleOrphansInput bounds one sweep of orphan payments.
type ClaimStaleOrphansInput struct {
	// OlderThanSeconds: orphans acknowledged at least this long ago. A checkout recorded
	// since claims its own orphans (store.Store.InsertCheckout), so only a payment whose checkout
	// never came is left by then.
	OlderThanSeconds int64 `json:"older_than_seconds"`
	Limit            int   `json:"limit"`
}
