// Temporal's errors as the contract's problems: retry later, overload, update limits, not found.

package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// temporalProblem maps an error talking to Temporal: a deadline or an unreachable server is a
// 503 the client may retry (a retry never starts a second saga); Temporal's limits on a
// workflow's updates are 429 with Retry-After.
func temporalProblem(err error) *Problem {
	var unavailableErr *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	var exhausted *serviceerror.ResourceExhausted
	// Passing states of one workflow: its workflow task is being retried (not ready for an
	// update), or the server aborted an update while it moved or reloaded the workflow.
	var notReady *serviceerror.WorkflowNotReady
	var aborted *serviceerror.Aborted
	// A namespace the frontend does not know (yet): a server that has just started, or whose
	// namespace cache is refreshing, says so for a moment. Either way the client can only
	// come back later; a namespace that never appears is a misconfiguration for the operator,
	// and every such 503 logs its cause.
	var noNamespace *serviceerror.NamespaceNotFound
	// A call that ended Canceled (a gRPC status, or the SDK's error for an update's wait that
	// timed out or was cancelled): nothing was decided that a retry would repeat, so the
	// client may come back, as after any deadline.
	var serverCancelled *serviceerror.Canceled
	var updateWait *client.WorkflowUpdateServiceTimeoutOrCanceledError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.As(err, &unavailableErr), errors.As(err, &deadline),
		errors.As(err, &notReady), errors.As(err, &aborted), errors.As(err, &noNamespace),
		errors.As(err, &serverCancelled), errors.As(err, &updateWait), status.Code(err) == codes.Canceled,
		// The workflow was cancelled (the Web UI's Cancel) while an update waited on it.
		temporal.IsCanceledError(err):
		return unavailable("temporal", err)
	case errors.As(err, &exhausted) && exhausted.Cause == enumspb.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT:
		// More than history.maxInFlightUpdates (10) requests on one checkout at once: its
		// client is retrying faster than the saga answers. (The SDK retries this itself
		// until the request's deadline, so it mostly surfaces as the 503 above.)
		p := problem(http.StatusTooManyRequests, "too_many_requests", "too many requests for this checkout at once; retry shortly")
		p.retryAfter = 1
		p.cause = err
		return p
	case errors.As(err, &exhausted):
		// A namespace or server rate limit: the service sheds load.
		p := problem(http.StatusServiceUnavailable, "overloaded", "the service is overloaded; retry shortly")
		p.retryAfter = 1
		p.cause = err
		return p
	case isPaused(err):
		// Support paused the saga (the Web UI's Pause): it takes no update until it is
		// resumed, so the client comes back later, as after any passing state.
		return unavailable("temporal", err)
	case isTotalUpdateLimit(err):
		p := tooManyUpdates("")
		p.cause = err
		return p
	}
	return internalError(err)
}

// isTotalUpdateLimit reports Temporal's refusal of any further update on a workflow
// (history.maxTotalUpdates, 2,000 by default): a FailedPrecondition, which is what an update
// to a running workflow gets for it.
func isTotalUpdateLimit(err error) bool {
	var fp *serviceerror.FailedPrecondition
	return errors.As(err, &fp)
}

// isPaused reports the server's refusal of an update to a paused workflow: a
// FailedPrecondition like the update limit's, told apart only by its message (server 1.32).
func isPaused(err error) bool {
	var fp *serviceerror.FailedPrecondition
	return errors.As(err, &fp) && strings.Contains(strings.ToLower(fp.Message), "workflow is paused")
}

// tooManyUpdateRetryAfter: past the total, only a saga-side change (support acting in
// Temporal, or the saga ending on its timer) makes room, so a client should not hurry.
const tooManyUpdateRetryAfter = 60

func tooManyUpdates(checkoutID string) *Problem {
	detail := "this checkout takes no more changes (Temporal's limit on updates per workflow); support can still end it in the Temporal Web UI"
	if checkoutID != "" {
		detail = "checkout " + checkoutID + " takes no more changes (Temporal's limit on updates per workflow); support can still end it in the Temporal Web UI"
	}
	p := problem(http.StatusTooManyRequests, "too_many_updates", detail)
	p.retryAfter = tooManyUpdateRetryAfter
	return p
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// reasonText is the message of the innermost application error (a validator's refusal).
func reasonText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	return err.Error()
}
