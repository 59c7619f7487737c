package shop

// Fingerprint identifies the request that created a checkout: the hash of its body, its
// Idempotency-Key and its caller (a client, a customer, or "" when neither authenticates).
// Postgres keeps it with the checkout, the saga with its input, the waiting room with each
// cart in line. A POST of an existing cart id is answered only after it is compared with
// the caller's (Judge).
type Fingerprint struct {
	RequestHash    string `json:"request_hash,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Caller         string `json:"caller,omitempty"`
}

// Match is how a request compares with the fingerprint of the checkout it names.
type Match int

const (
	// SameRequest: the creator's request again (a retry); it may see the checkout and its
	// secret.
	SameRequest Match = iota
	// KeyReused: the creator's Idempotency-Key with another body (422).
	KeyReused
	// OtherRequest: another caller, or the same caller with another body and key (409
	// checkout_exists): no view, no secret.
	OtherRequest
)

// Judge compares the fingerprint of a request with the checkout's. A checkout without a
// fingerprint (recorded before fingerprints were kept) matches no request; one without a
// caller (a saga older than callers) is judged by the body, whose hash names the customer.
func (f Fingerprint) Judge(req Fingerprint) Match {
	switch {
	case f.RequestHash == "" || f.Caller != "" && f.Caller != req.Caller:
		return OtherRequest
	case f.RequestHash == req.RequestHash:
		return SameRequest
	case f.IdempotencyKey == req.IdempotencyKey:
		return KeyReused
	}
	return OtherRequest
}
