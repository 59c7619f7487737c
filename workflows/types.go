package workflows

import (
	"strconv"

	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/shop"
)

// TaskQueue is where checkout workflows and their activities run.
const TaskQueue = "checkout"

// TaskQueuePartitions is how many partitions the product asks the Temporal server to split
// TaskQueue into: one. Temporal's default of four spreads a burst's workflow tasks over
// partitions that may have no poller waiting, and such a task waits there. In 16 benchmark
// runs of each (bench -e2e-only, 2 cores), four partitions stalled every workflow task then
// waiting for about 2 s in 5 of 32 phases; one partition never did. A partition is served by
// one matching host, so a deployment whose task rate outgrows one raises both settings
// (write partitions first, then read once the extra ones drained), with more pollers.
const TaskQueuePartitions = 1

// PartitionConfig are the dynamic-config values that give a server's task queues n
// partitions, as `temporal server start-dev --dynamic-config-value` takes them. The product's
// are PartitionConfig(TaskQueuePartitions); docker-compose.yml sets the same, for TaskQueue only.
func PartitionConfig(n int) []string {
	return []string{"matching.numTaskqueueReadPartitions=" + strconv.Itoa(n), "matching.numTaskqueueWritePartitions=" + strconv.Itoa(n)}
}

// DevServerFlags are the `temporal server start-dev` flags of a dev server that runs the
// product as it is meant to run: the contract's search attributes, PartitionConfig, and the
// search-attribute cache a real server keeps. The CLI turns that cache off
// (system.forceSearchAttributesCacheRefreshOnRead=true) so that attributes added while it runs
// show at once, and pays a read of SQLite for every attribute it checks: about 3.6 ms of the
// dev server's CPU per checkout in the benchmark. The product's attributes are written into
// the namespace before the server starts (--search-attribute), so the cache already has them.
// And eager activities (system.enableActivityEagerExecution, off in Temporal's defaults): the
// steps that end a checkout unpaid are regular activities, which then start in the answer to
// the workflow task that scheduled them, without a trip through matching (an out-of-stock
// saga's state transitions fell from 82.8 to 51.8 in e2e/cost_test.go).
func DevServerFlags() []string {
	var flags []string
	for _, k := range SearchAttributes {
		// The type's String is the CLI's name for it: Keyword, KeywordList, Int, Datetime, Bool.
		flags = append(flags, "--search-attribute", k.GetName()+"="+k.GetValueType().String())
	}
	for _, kv := range append(PartitionConfig(TaskQueuePartitions), "system.forceSearchAttributesCacheRefreshOnRead=false", "system.enableActivityEagerExecution=true") {
		flags = append(flags, "--dynamic-config-value", kv)
	}
	return flags
}

// Names of the saga's messages. The API and support tools use these.
const (
	// UpdateReservation answers once every SKU is held or the checkout was refused; the API
	// sends it with update-with-start so a POST gets the reservation outcome in one call.
	UpdateReservation = "reservation"
	// UpdateCancel ends an open checkout as cancelled and answers with the final view.
	UpdateCancel = "cancel"
	// SignalPayment delivers a verified payment event.
	SignalPayment = "payment"
	// QueryStatus returns the checkout view.
	QueryStatus = "status"
	// UpdateExtend moves the payment deadline later (support; bounded by MaxHold).
	UpdateExtend = "extend"
	// UpdateRetry retries a stuck step at once (support).
	UpdateRetry = "retry"
	// UpdateAcknowledge clears NeedsAttention once support has dealt with the cause.
	UpdateAcknowledge = "acknowledge"
)

// ExtendRequest is the argument of the extend update.
type ExtendRequest struct {
	Seconds int64 `json:"seconds"`
}

// RetryRequest is the argument of the retry update.
type RetryRequest struct{}

// AcknowledgeRequest is the argument of the acknowledge update.
type AcknowledgeRequest struct{}

// Input starts a checkout saga.
type Input struct {
	CheckoutID string `json:"checkout_id"`
	CustomerID string `json:"customer_id"`
	// Items are the cart's lines without prices: RecordCheckout prices them from the catalog.
	Items []shop.CartLine `json:"items"`
	// PaymentTimeoutSeconds bounds the wait for payment; 0 means the default.
	PaymentTimeoutSeconds int64 `json:"payment_timeout_seconds"`
	// RequestID identifies the HTTP request that started the saga, so the API can tell the
	// request that created it (201) from a retry that attached to it (200).
	RequestID string `json:"request_id"`
	// RequestHash fingerprints the request body, so a reused idempotency key with a
	// different body is refused.
	RequestHash string `json:"request_hash"`
	// IdempotencyKey is the key the starting request carried (the cart id by default).
	IdempotencyKey string `json:"idempotency_key"`
	// Caller is who sent the starting request (the API's callerScope: a client or a
	// customer, "" when neither authenticated): a request of another caller is not a retry.
	Caller string `json:"caller,omitempty"`
	// Shape is the saga's shape the starter asked for: StartOperation starts new sagas at
	// NewestShape. A saga started before shapes existed has 0 and asks workflow.GetVersion
	// as before (shapes.go).
	Shape int `json:"shape,omitempty"`
}

// ReservationRequest is the argument of the reservation update. RequestHash and
// IdempotencyKey are the request's (Input's): a request with another body is refused by the
// update's validator, so it never enters the history. An API older than them sends neither.
type ReservationRequest struct {
	RequestID      string `json:"request_id"`
	RequestHash    string `json:"request_hash,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Caller         string `json:"caller,omitempty"`
}

// ReservationResult answers the reservation update.
type ReservationResult struct {
	View shop.View `json:"view"`
	// Created is true when the request that sent this update is the one that started the saga.
	Created bool `json:"created"`
	// RequestHash is the fingerprint of the body that started the saga.
	RequestHash string `json:"request_hash"`
	// IdempotencyKey is the key of the request that started the saga.
	IdempotencyKey string `json:"idempotency_key"`
	// Caller is who sent the request that started the saga.
	Caller string `json:"caller,omitempty"`
	// RejectCode is set when the checkout was refused at reservation.
	RejectCode string `json:"reject_code,omitempty"`
}

// CancelRequest is the argument of the cancel update.
type CancelRequest struct {
	// By says who cancelled: "customer" or "support".
	By string `json:"by"`
}

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
