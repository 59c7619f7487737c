package workflows

import (
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/shop"
)

// How a step's error becomes the checkout's end: a named refusal (out of stock, unknown SKU,
// ...) is the buyer's answer; anything else is a failure whose reason hides the infrastructure.

// failureStatus maps a step's error to the end state.
func (c *checkout) failureStatus(err error) shop.Status {
	if temporal.IsCanceledError(err) {
		return shop.StatusCancelled
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return shop.StatusFailed
	}
	r, ok := refusals[appErr.Type()]
	if !ok {
		return shop.StatusFailed
	}
	c.rejectCode = r.code
	return r.status
}

// refusals maps the error types of a step that refused the checkout to the reject code the
// buyer sees and the end state. shop.ErrTypeHoldEnded is this saga's own compensation: a
// workflow task that reserved, was refused, released, and was lost with its worker before it
// completed is run again and finds its tombstone. The lost run was refused; so is this one.
var refusals = map[string]struct {
	code   string
	status shop.Status
}{
	shop.ErrTypeOutOfStock:    {shop.RejectOutOfStock, shop.StatusOutOfStock},
	shop.ErrTypeNotStocked:    {shop.RejectOutOfStock, shop.StatusOutOfStock},
	shop.ErrTypeHoldEnded:     {shop.RejectOutOfStock, shop.StatusOutOfStock},
	shop.ErrTypeOverLimit:     {shop.RejectOverLimit, shop.StatusOutOfStock},
	shop.ErrTypeUnknownSKU:    {shop.RejectUnknownSKU, shop.StatusFailed},
	shop.ErrTypeMixedCurrency: {shop.RejectMixedCurrency, shop.StatusFailed},
}

// IsErrorType tells whether err is, or wraps, an application error of type t: one of the
// saga's refusals (shop.ErrType...), as the activities raise them and the update handlers
// answer them.
func IsErrorType(err error, t string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == t
}

// reasonOf is the human reason stored for an end and shown to the buyer. A named refusal
// (a non-retryable application error an activity chose) carries our own message. Anything
// else is an infrastructure failure whose text names hosts, users and drivers: the reason
// says only that the step kept failing, and the full error stays in the saga's history and
// the worker's log.
func reasonOf(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.NonRetryable() && appErr.Type() != "" {
		return appErr.Error()
	}
	if temporal.IsCanceledError(err) {
		return "cancelled"
	}
	return "a step kept failing (timeouts or an unreachable Redis, Postgres or payment provider); the saga's history has the error"
}
