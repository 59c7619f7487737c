package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
)

// TestTemporalProblemMapsUpdateLimits: Temporal's refusals for too many updates on one
// workflow are answers a client can act on (429/503 with Retry-After), not 500s. These are
// the errors Temporal 1.29's update registry returns, as the SDK hands them over (wrapped).
func TestTemporalProblemMapsUpdateLimits(t *testing.T) {
	for _, tt := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"in-flight updates on one workflow", &serviceerror.ResourceExhausted{
			Cause: enumspb.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT, Scope: enumspb.RESOURCE_EXHAUSTED_SCOPE_NAMESPACE,
			Message: "limit on number of concurrent in-flight updates has been reached (10)"}, http.StatusTooManyRequests, "too_many_requests"},
		{"namespace rate limit", &serviceerror.ResourceExhausted{
			Cause: enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT, Message: "namespace rate limit exceeded"}, http.StatusServiceUnavailable, "overloaded"},
		{"total updates on one workflow", serviceerror.NewFailedPrecondition(
			"The limit on the total number of distinct updates in this workflow has been reached (2000)."), http.StatusTooManyRequests, "too_many_updates"},
		// Passing states of one workflow, retryable: not the 500 of an unexpected error.
		{"workflow task being retried", serviceerror.NewWorkflowNotReady(
			"Unable to perform workflow execution update due to unexpected workflow task failure."), http.StatusServiceUnavailable, "service_unavailable"},
		{"update aborted by the server", serviceerror.NewAborted("Workflow Update was aborted."), http.StatusServiceUnavailable, "service_unavailable"},
		// A frontend that does not know the namespace for a moment (a server just started;
		// seen once in the fault suite as "failed workflow start: Namespace default is not found.").
		{"namespace not known yet", serviceerror.NewNamespaceNotFound("default"), http.StatusServiceUnavailable, "service_unavailable"},
		// The workflow was cancelled (the Web UI's Cancel) while the update waited on it: the
		// handler's wait ends with a CanceledError. A retry answers the saga's end.
		{"workflow cancelled while the update waited", temporal.NewCanceledError("workflow cancelled"), http.StatusServiceUnavailable, "service_unavailable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := temporalProblem(fmt.Errorf("failed workflow update: %w", tt.err))
			if p.Status != tt.status || p.Code != tt.code || p.retryAfter <= 0 {
				t.Errorf("temporalProblem = %d %s (Retry-After %d), want %d %s with Retry-After", p.Status, p.Code, p.retryAfter, tt.status, tt.code)
			}
		})
	}
}

// TestEchoServerErrorsHideTheirMessage: an echo.HTTPError of 5xx carries whatever text its
// creator put in (middleware, a library); clients get a stable code and a generic detail.
func TestEchoServerErrorsHideTheirMessage(t *testing.T) {
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout} {
		p := fromEchoError(echo.NewHTTPError(status, "dial tcp 10.0.0.7:5432: connect: connection refused"))
		if p.Status != status || p.Code != "internal_error" || strings.Contains(p.Detail, "10.0.0.7") {
			t.Errorf("fromEchoError(%d) = %d %s %q, want %d internal_error without the message", status, p.Status, p.Code, p.Detail, status)
		}
	}
}
