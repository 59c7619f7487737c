package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// Support actions go through Temporal updates, never by hand in Redis or Postgres: each is
// validated by the saga itself, so a bad request (extending a finished checkout, retrying
// when nothing is stuck) is refused before it changes anything.

// ExtendRequest is the body of POST /v1/admin/checkouts/{id}/extend.
type ExtendRequest struct {
	Seconds int64 `json:"seconds"`
}

func (s *Server) supportExtend(c echo.Context) error {
	var req ExtendRequest
	if err := decodeStrict(c.Request().Body, &req); err != nil {
		return err
	}
	if req.Seconds < 1 || req.Seconds > workflows.MaxPaymentTimeoutSeconds {
		return invalid("invalid_request", FieldError{"seconds", "must be between 1 and 86400"})
	}
	return s.supportUpdate(c, workflows.UpdateExtend, workflows.ExtendRequest{Seconds: req.Seconds})
}

// supportCancel cancels a checkout for support: a cart waiting in line is cancelled there,
// as its buyer would; any other goes to its saga.
func (s *Server) supportCancel(c echo.Context) error {
	id, err := cartParam(c)
	if err != nil {
		return err
	}
	if _, _, answered, err := s.cancelInRoom(c, id, "support"); answered {
		return err
	}
	return s.supportUpdate(c, workflows.UpdateCancel, workflows.CancelRequest{By: "support"})
}

func (s *Server) supportRetry(c echo.Context) error {
	return s.supportUpdate(c, workflows.UpdateRetry, workflows.RetryRequest{})
}

func (s *Server) supportAcknowledge(c echo.Context) error {
	return s.supportUpdate(c, workflows.UpdateAcknowledge, workflows.AcknowledgeRequest{})
}

// RevokedSecret is the answer to POST /v1/admin/checkouts/{id}/revoke-secret.
type RevokedSecret struct {
	CheckoutID    string `json:"checkout_id"`
	SecretVersion int64  `json:"secret_version"`
}

// supportRevokeSecret revokes one checkout's secret, for a secret that leaked (a support
// ticket, a screenshot, a backend's log): the checkout moves to the next secret version, so
// the secrets handed out so far open nothing, and no other checkout's changes. Its buyer
// still reads it with their identity token (browser mode), and the creator's retry of the
// POST gets the new secret. Not a Temporal update: the secret is the API's, and the saga
// knows nothing of it. Any cart id may be revoked, recorded or not (one waiting in line).
func (s *Server) supportRevokeSecret(c echo.Context) error {
	id, err := cartParam(c)
	if err != nil {
		return err
	}
	if s.Records == nil {
		return unavailable("postgres", errors.New("no checkout records configured"))
	}
	version, err := s.Records.RevokeSecret(c.Request().Context(), id)
	if err != nil {
		return unavailable("postgres", err)
	}
	// A read of the old version still in flight is not joined by the next request: it
	// waits for the next read (readRecord).
	// The request log names the path, the checkout and the admin token; this line says what
	// changed, for whoever audits who revoked what.
	s.Logger.Info("checkout secret revoked", "checkout_id", id, "secret_version", version,
		"client_address", c.RealIP(), "admin", true)
	return c.JSON(http.StatusOK, RevokedSecret{CheckoutID: id, SecretVersion: version})
}

// supportUpdate sends a support update to a checkout's saga and answers with its view.
func (s *Server) supportUpdate(c echo.Context, name string, arg any) error {
	id, err := cartParam(c)
	if err != nil {
		return err
	}
	var v shop.View
	if err := s.update(c.Request().Context(), shop.WorkflowID(id), name, arg, &v); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.present(v))
}

// supportRetryRefund wakes a stuck refund. The ref is whatever the provider sent: a Stripe
// PaymentIntent id, or a Standard Webhooks payment_id of up to 255 characters, which may hold
// characters a path must escape ('/' as %2F, say).
func (s *Server) supportRetryRefund(c echo.Context) error {
	provider := c.Param("provider")
	ref, err := pathParam(c, "payment_ref")
	if err != nil || ref == "" || len(ref) > maxPaymentRefLength {
		return invalid("invalid_request", FieldError{"payment_ref", "must be 1 to 255 characters, percent-encoded where a path needs it"})
	}
	if provider != providerStripe && !standardProviderPattern.MatchString(provider) {
		return invalid("invalid_request", FieldError{"provider", "must be stripe or 1 to 32 lower-case letters, digits, '-' or '_'"})
	}
	var v workflows.RefundView
	if err := s.update(c.Request().Context(), workflows.RefundWorkflowID(provider, ref), workflows.UpdateRetry, workflows.RetryRequest{}, &v); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// maxPaymentRefLength is the longest payment ref a webhook records (Standard Webhooks'
// payment_id; Stripe's ids are far shorter).
const maxPaymentRefLength = 255

// pathParam is a path parameter as the client meant it. Echo matches routes on the raw path
// when the request escapes something the default encoding would not (a %2F), and then hands
// out the parameter still escaped.
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, nil
	}
	return url.PathUnescape(v)
}

// update runs a validated update and maps the saga's refusals to HTTP answers.
func (s *Server) update(ctx context.Context, workflowID, name string, arg, result any) error {
	handle, err := s.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: name, Args: []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = handle.Get(ctx, result)
	}
	switch {
	case err == nil:
		return nil
	case isNotFound(err):
		return problem(http.StatusConflict, "not_open", workflowID+" is not running (unknown or already finished)")
	case workflows.IsErrorType(err, shop.ErrTypeAlreadyPaid):
		return problem(http.StatusConflict, "already_confirmed", "the checkout is paid and cannot be cancelled")
	case workflows.IsErrorType(err, shop.ErrTypeNotExtendable):
		return problem(http.StatusConflict, "not_extendable", reasonText(err))
	case workflows.IsErrorType(err, shop.ErrTypeNothingToRetry):
		return problem(http.StatusConflict, "nothing_to_retry", reasonText(err))
	case workflows.IsErrorType(err, shop.ErrTypeInvalidSupportRequest):
		return problem(http.StatusUnprocessableEntity, "invalid_request", reasonText(err))
	}
	return temporalProblem(err)
}
