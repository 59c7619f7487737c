package api

// RequestHash is the fingerprint of a request body, for tests that record a checkout as the
// API would have.
var RequestHash = requestHash
