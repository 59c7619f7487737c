package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/shop"
)

// Problem is an RFC 9457 problem detail with the contract's stable code.
type Problem struct {
	Type      string          `json:"type"`
	Title     string          `json:"title"`
	Status    int             `json:"status"`
	Code      string          `json:"code"`
	Detail    string          `json:"detail"`
	Errors    []FieldError    `json:"errors,omitempty"`
	Shortages []shop.Shortage `json:"shortages,omitempty"`

	retryAfter int   // seconds; set for 503
	cause      error // logged, never sent
}

// FieldError names one bad field of a request.
type FieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

func problem(status int, code, detail string) *Problem {
	return &Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code, Detail: detail}
}

// invalid is a 422 naming the bad fields.
func invalid(code string, errs ...FieldError) *Problem {
	p := problem(http.StatusUnprocessableEntity, code, errs[0].Field+": "+errs[0].Detail)
	if len(errs) > 1 {
		p.Detail = fmt.Sprintf("%s (and %d more)", p.Detail, len(errs)-1)
	}
	p.Errors = errs
	return p
}

// unavailable is a 503 with Retry-After: a dependency is down; the request may be repeated.
func unavailable(what string, cause error) *Problem {
	p := problem(http.StatusServiceUnavailable, "service_unavailable", what+" is unavailable; retry shortly")
	p.retryAfter = 1
	p.cause = cause
	return p
}

// internalError hides the cause from the client and logs it.
func internalError(cause error) *Problem {
	p := problem(http.StatusInternalServerError, "internal_error", "the request could not be completed")
	p.cause = cause
	return p
}

// handleError is the one place errors become responses.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var p *Problem
	var he *echo.HTTPError
	switch {
	case errors.As(err, &p):
	case errors.As(err, &he):
		p = fromEchoError(he)
	default:
		p = internalError(err)
	}
	c.Set(ctxProblemCode, p.Code)
	if p.Status == http.StatusServiceUnavailable {
		metrics.UnavailableAnswers.WithLabelValues(p.Code).Inc()
	}
	if p.cause != nil {
		s.Logger.Error("request failed", "code", p.Code, "path", c.Request().URL.Path, "error", p.cause)
	}
	if p.retryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
	if err := c.JSON(p.Status, p); err != nil {
		s.Logger.Error("write problem response", "error", err)
	}
}

func fromEchoError(he *echo.HTTPError) *Problem {
	switch he.Code {
	case http.StatusNotFound:
		return problem(he.Code, "not_found", "no such resource")
	case http.StatusMethodNotAllowed:
		return problem(he.Code, "method_not_allowed", "method not allowed on this resource")
	case http.StatusRequestEntityTooLarge:
		return problem(he.Code, "body_too_large", "request body is too large")
	case http.StatusServiceUnavailable:
		p := problem(he.Code, "service_unavailable", "the request timed out; retry shortly")
		p.retryAfter = 1
		return p
	}
	if he.Code >= 500 {
		// Its message is whatever its creator wrote, possibly an internal error: log it.
		p := problem(he.Code, "internal_error", "the request could not be completed")
		p.cause = he
		return p
	}
	return problem(he.Code, "http_error", fmt.Sprint(he.Message))
}
