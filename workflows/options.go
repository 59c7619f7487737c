package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Payment timeout bounds, in seconds, as the contract states them.
const (
	MinPaymentTimeoutSeconds = 1
	// MaxPaymentTimeoutSeconds is one day: longer holds lock stock away from other buyers
	// for longer than any card payment takes, and support can extend a hold if needed.
	MaxPaymentTimeoutSeconds = 86_400
	// DefaultPaymentTimeoutSeconds is used when neither the request nor the configuration
	// names one: fifteen minutes is the usual card-checkout window.
	DefaultPaymentTimeoutSeconds = 900
)

// The first two steps (record, reserve) run as local activities: each is short and
// idempotent, and running them inside the workflow task saves the server the scheduling and
// dispatch of an activity task per step, which is most of a checkout's cost on the server
// during a flash sale. They still show in the history (as markers) with their summaries.

// recordOptions: Postgres writes at the start of a checkout. The API waits for the
// reservation while these run, so attempts are short; a Postgres outage longer than the
// schedule-to-close ends the checkout as failed (with nothing held) instead of leaving the
// buyer waiting.
var recordOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    5 * time.Second,
	ScheduleToCloseTimeout: 2 * time.Minute,
	RetryPolicy:            startRetry,
}

// reserveOptions: one Redis script call takes well under a millisecond, so 2 s per attempt is
// generous; retries ride out a Redis failover of up to about two minutes, after which the
// checkout fails and every hold is released.
var reserveOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    2 * time.Second,
	ScheduleToCloseTimeout: 2 * time.Minute,
	RetryPolicy:            startRetry,
}

// startRetry is the backoff of the steps a buyer waits for (record, reserve): quick first
// retries, capped at 5 s, within each step's schedule-to-close.
var startRetry = &temporal.RetryPolicy{
	InitialInterval:    100 * time.Millisecond,
	BackoffCoefficient: 2,
	MaximumInterval:    5 * time.Second,
}

// mustFinishOptions: confirmation and commits of a paid checkout. These must happen however
// long an outage lasts. Ten attempts (about two minutes with this backoff) ride out a blip;
// after that the step is stuck: the checkout is flagged for support and the step is tried
// again every stuckRetryInterval or on support's retry (see checkout.persist), never dropped.
// They are local activities too: one Postgres transaction and one script each, idempotent
// per checkout, so running them inside the workflow task costs the server a third of the
// events an activity task would, and a worker that dies mid-step re-runs them harmlessly.
var mustFinishOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	// A local activity's schedule-to-close defaults to its start-to-close, which would cut
	// the retry budget to 10 s: name it, a little over the ten attempts' backoff.
	ScheduleToCloseTimeout: 3 * time.Minute,
	RetryPolicy:            mustFinishRetry,
}

// mustFinishRetry is the retry budget of every step that must finish: ten attempts, about
// two minutes, before the step counts as stuck (see checkout.persist).
var mustFinishRetry = &temporal.RetryPolicy{
	InitialInterval:    200 * time.Millisecond,
	BackoffCoefficient: 2,
	MaximumInterval:    30 * time.Second,
	MaximumAttempts:    10,
}

// stuckRetryInterval is how soon a stuck step tries again by itself: often enough that a
// short outage's end is noticed within minutes. A saga's wait doubles each round up to
// stuckRetryMax (checkout.persist): a round (ten attempts, their workflow-task heartbeats,
// the timer) adds 35 to 75 history events, so at one round in two hours a step stuck for two
// months stays under the server's 51,200-event limit, which would terminate the saga.
// Support's retry action tries at once, whatever the wait.
const stuckRetryInterval = 5 * time.Minute

// stuckRetryMax caps the doubling of stuckRetryInterval (see above).
const stuckRetryMax = 2 * time.Hour

// paymentTimeout turns the requested seconds into the hold's duration, using the default for 0
// and clamping to the contract's bounds (the API validates too; this guards other callers).
func paymentTimeout(seconds int64) time.Duration {
	switch {
	case seconds == 0:
		seconds = DefaultPaymentTimeoutSeconds
	case seconds < MinPaymentTimeoutSeconds:
		seconds = MinPaymentTimeoutSeconds
	case seconds > MaxPaymentTimeoutSeconds:
		seconds = MaxPaymentTimeoutSeconds
	}
	return time.Duration(seconds) * time.Second
}

// endOptions: releases and the outcome record of a checkout that did not complete, with the
// same retry budget and stuck handling as mustFinishOptions. They are regular activities
// (see checkout.undoStep): a local activity runs on whichever worker holds the workflow
// task, even one the server has already given up on, and a stale release would take holds
// from the live run.
var endOptions = workflow.ActivityOptions{
	StartToCloseTimeout:    10 * time.Second,
	ScheduleToCloseTimeout: 3 * time.Minute, // see mustFinishOptions
	RetryPolicy:            mustFinishRetry,
}

// undoOptions: the refund's record steps (idempotent Postgres upserts whose stale re-run is
// harmless, so they stay local activities), and the ending steps of sagas started before
// endStepsChange. The same budget as mustFinishOptions.
var undoOptions = mustFinishOptions

func withSummary(o workflow.ActivityOptions, summary string) workflow.ActivityOptions {
	o.Summary = summary
	return o
}

func withLocalSummary(o workflow.LocalActivityOptions, summary string) workflow.LocalActivityOptions {
	o.Summary = summary
	return o
}
