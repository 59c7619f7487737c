package checkouttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/checkout-saga/checkout-saga/shop"
)

// StripeEvent is a Stripe PaymentIntent event, as the webhook endpoint receives it.
type StripeEvent struct {
	ID            string // evt_...
	Type          string // payment_intent.succeeded, payment_intent.payment_failed, ...
	PaymentIntent string // pi_...
	CheckoutID    string // metadata.checkout_id; "" leaves the metadata out
	Amount        int64  // cents, also amount_received
	Currency      string // "usd" when empty
}

// Paid is the payment_intent.succeeded event of a checkout: event evt_<id>, intent pi_<id>.
func Paid(checkoutID string, amount int64) StripeEvent {
	return StripeEvent{ID: "evt_" + checkoutID, Type: "payment_intent.succeeded", PaymentIntent: "pi_" + checkoutID,
		CheckoutID: checkoutID, Amount: amount}
}

// Declined is the payment_intent.payment_failed event of a checkout's declined card: event
// evt_declined_<id>, intent pi_declined_<id> (another intent than Paid's, as a second card is).
func Declined(checkoutID string, amount int64) StripeEvent {
	return StripeEvent{ID: "evt_declined_" + checkoutID, Type: "payment_intent.payment_failed",
		PaymentIntent: "pi_declined_" + checkoutID, CheckoutID: checkoutID, Amount: amount}
}

// Body renders the event with the API version of the product's stripe-go.
func (e StripeEvent) Body() []byte {
	metadata := map[string]string{}
	if e.CheckoutID != "" {
		metadata["checkout_id"] = e.CheckoutID
	}
	currency := e.Currency
	if currency == "" {
		currency = "usd"
	}
	body, _ := json.Marshal(map[string]any{
		"id": e.ID, "object": "event", "type": e.Type, "api_version": stripe.APIVersion,
		"data": map[string]any{"object": map[string]any{
			"id": e.PaymentIntent, "object": "payment_intent", "amount": e.Amount, "amount_received": e.Amount,
			"currency": currency, "metadata": metadata,
		}},
	})
	return body
}

// StripeSignature is the Stripe-Signature header of body signed with secret at a time.
func StripeSignature(body []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at}).Header
}

// SendStripe delivers an event signed now with secret to /v1/webhooks/stripe and returns
// the answer and its status (or problem code).
func (c *Client) SendStripe(ctx context.Context, e StripeEvent, secret string) (Answer, string, error) {
	body := e.Body()
	a, err := c.Do(ctx, http.MethodPost, "/v1/webhooks/stripe", body, map[string]string{"Stripe-Signature": StripeSignature(body, secret, time.Now())}, nil)
	status, _ := a.JSON()["status"].(string)
	if status == "" {
		status = a.Problem
	}
	return a, status, err
}

// Pay delivers the checkout's payment_intent.succeeded and fails unless the API signalled
// the saga with it (or had already: "duplicate").
func (c *Client) Pay(ctx context.Context, checkoutID string, amount int64, secret string) error {
	a, status, err := c.SendStripe(ctx, Paid(checkoutID, amount), secret)
	if err != nil {
		return fmt.Errorf("pay %s: %w", checkoutID, err)
	}
	if a.Code != http.StatusOK || (status != shop.DispositionSignalled && status != "duplicate") {
		return fmt.Errorf("pay %s: webhook answered %d %s", checkoutID, a.Code, a.Body)
	}
	return nil
}
