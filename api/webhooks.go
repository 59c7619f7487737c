package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// DefaultWebhookTolerance is how old a Stripe signature may be: Stripe's own default, which
// bounds how long a captured request could be replayed.
const DefaultWebhookTolerance = 300 * time.Second

const providerStripe = "stripe"

// stripeEvent holds only the fields the product reads, so an event rendered for any Stripe
// API version is accepted: a strict version match would drop real payments after an account
// upgrade.
type stripeEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Data struct {
		Object struct {
			ID             string            `json:"id"`
			Amount         int64             `json:"amount"`
			AmountReceived int64             `json:"amount_received"`
			Currency       string            `json:"currency"`
			Metadata       map[string]string `json:"metadata"`
		} `json:"object"`
	} `json:"data"`
}

// stripeOutcomes maps the event types the product acts on; other types are acknowledged.
var stripeOutcomes = map[string]workflows.PaymentKind{
	"payment_intent.succeeded":      workflows.PaymentSucceeded,
	"payment_intent.payment_failed": workflows.PaymentFailed,
	"payment_intent.canceled":       workflows.PaymentFailed,
}

// stripeWebhook verifies a Stripe event on the raw body, records it once in Postgres, and
// delivers it to its saga. 2xx means recorded and delivered (or deliberately not delivered);
// 5xx asks Stripe to retry, and the retry delivers what this attempt could not.
func (s *Server) stripeWebhook(c echo.Context) error {
	payload, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return readError(err)
	}
	if !s.verifyStripe(payload, c.Request().Header.Get("Stripe-Signature")) {
		return problem(http.StatusBadRequest, "invalid_signature", "Stripe-Signature does not verify or is too old")
	}
	var ev stripeEvent
	if err := json.Unmarshal(payload, &ev); err != nil || ev.ID == "" || ev.Type == "" {
		return problem(http.StatusBadRequest, "invalid_payload", "event body is not a Stripe event with an id and a type")
	}
	obj := ev.Data.Object
	amount := obj.AmountReceived
	if amount == 0 {
		amount = obj.Amount
	}
	checkoutID := obj.Metadata["checkout_id"]
	if !idPattern.MatchString(checkoutID) {
		checkoutID = ""
	}
	if checkoutID != "" {
		c.Set(ctxCheckoutID, checkoutID)
		c.Set(ctxWorkflowID, workflows.WorkflowID(checkoutID))
	}
	ctx := c.Request().Context()
	rec, err := s.Payments.RecordPaymentEvent(ctx, activities.PaymentEvent{
		Provider: providerStripe, EventID: ev.ID, Type: ev.Type, CheckoutID: checkoutID,
		PaymentRef: obj.ID, AmountCents: amount, Currency: obj.Currency, Payload: payload,
	})
	if err != nil {
		return unavailable("postgres", err)
	}
	if rec.Delivered {
		return c.JSON(http.StatusOK, map[string]string{"status": "duplicate"})
	}

	outcome, acted := stripeOutcomes[ev.Type]
	disposition := activities.DispositionSignalled
	switch {
	case !acted:
		disposition = activities.DispositionIgnored
	case checkoutID == "":
		disposition = activities.DispositionOrphan
	default:
		disposition, err = s.deliver(ctx, checkoutID, workflows.Payment{
			Provider: providerStripe, EventID: ev.ID, Outcome: outcome,
			PaymentRef: obj.ID, AmountCents: amount, Currency: obj.Currency,
		})
		if err != nil {
			return err
		}
	}
	if err := s.Payments.MarkPaymentEventDelivered(ctx, providerStripe, ev.ID, disposition); err != nil {
		// Delivered but not marked: the retry delivers again and the saga ignores the repeat.
		return unavailable("postgres", err)
	}
	s.Logger.Info("payment event handled", "provider", providerStripe, "event_id", ev.ID,
		"type", ev.Type, "checkout_id", checkoutID, "disposition", disposition)
	return c.JSON(http.StatusOK, map[string]string{"status": disposition})
}

// deliver signals a payment to its saga. A saga that has finished, or a checkout nobody
// knows, is not an error: the event is kept for refund or for support.
func (s *Server) deliver(ctx context.Context, checkoutID string, p workflows.Payment) (string, error) {
	err := s.Temporal.SignalWorkflow(ctx, workflows.WorkflowID(checkoutID), "", workflows.SignalPayment, p)
	switch {
	case err == nil:
		return activities.DispositionSignalled, nil
	case !isNotFound(err):
		return "", temporalProblem(err)
	}
	_, err = s.Records.Checkout(ctx, checkoutID)
	switch {
	case activities.IsNotFound(err):
		return activities.DispositionOrphan, nil
	case err != nil:
		return "", unavailable("postgres", err)
	}
	return activities.DispositionLate, nil
}

// verifyStripe accepts a signature made with any of the configured secrets, so a secret can
// be rotated without dropping events.
func (s *Server) verifyStripe(payload []byte, header string) bool {
	tolerance := s.cfg.StripeWebhookTolerance
	if tolerance == 0 {
		tolerance = DefaultWebhookTolerance
	}
	for _, secret := range s.cfg.StripeWebhookSecrets {
		err := webhook.ValidatePayloadWithTolerance(payload, header, secret, tolerance)
		if err == nil {
			return true
		}
		if errors.Is(err, webhook.ErrNotSigned) || errors.Is(err, webhook.ErrInvalidHeader) || errors.Is(err, webhook.ErrTooOld) {
			return false // no other secret can fix these
		}
	}
	return false
}
