package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Auditor checks the product's promises across Postgres, Redis and Temporal (package audit;
// the binary wires an *audit.Auditor).
type Auditor interface {
	Run(ctx context.Context) (shop.AuditReport, error)
}

// getAudit is GET /v1/admin/audit: the audit's report as JSON, 200 whether or not it found
// violations (a clean report has "violations": []). 503 when a check could not run, since a
// report missing a check must not read as clean; the log has the cause.
func (s *Server) getAudit(c echo.Context) error {
	if s.Audit == nil {
		return problem(http.StatusServiceUnavailable, "audit_unavailable", "this server has no audit configured")
	}
	rep, err := s.Audit.Run(c.Request().Context())
	if err != nil {
		s.Logger.Error("audit could not run every check", "error", err)
		return problem(http.StatusServiceUnavailable, "audit_incomplete",
			"these checks could not run (a store is unreachable; see the log): "+strings.Join(failedChecks(rep), ", "))
	}
	return c.JSON(http.StatusOK, rep)
}

// failedChecks names the checks a report lists as errors.
func failedChecks(rep shop.AuditReport) []string {
	names := make([]string, 0, len(rep.Errors))
	for _, e := range rep.Errors {
		names = append(names, e.Check)
	}
	return names
}
