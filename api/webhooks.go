package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stripe/stripe-go/v82/webhook"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/shop"
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
	// Livemode is false for a test-mode event, whose money is not real (a test card).
	Livemode bool `json:"livemode"`
	Data     struct {
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
var stripeOutcomes = map[string]shop.PaymentKind{
	"payment_intent.succeeded":      shop.PaymentSucceeded,
	"payment_intent.payment_failed": shop.PaymentFailed,
	"payment_intent.canceled":       shop.PaymentCanceled,
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
	if !ev.Livemode && s.cfg.StripeLiveOnly {
		// Signed, but by a test-mode endpoint's secret listed beside the live one: a test
		// card costs nothing, so its payment must never confirm a real order.
		return problem(http.StatusBadRequest, "test_mode_event", "a Stripe test-mode event (livemode false) at a live endpoint; set STRIPE_TEST_MODE=true to take test payments")
	}
	obj := ev.Data.Object
	amount := obj.AmountReceived
	if amount == 0 {
		amount = obj.Amount
	}
	outcome, acted := stripeOutcomes[ev.Type]
	return s.recordAndDeliver(c, verifiedEvent{
		Provider: providerStripe, EventID: ev.ID, Type: ev.Type, Outcome: outcome, Acted: acted,
		CheckoutID: obj.Metadata["checkout_id"], PaymentRef: obj.ID, AmountCents: amount,
		Currency: obj.Currency, Payload: payload,
	})
}

// verifiedEvent is a payment event whose signature verified, read down to what the product
// needs, whatever its provider.
type verifiedEvent struct {
	Provider, EventID, Type string
	// Outcome is what the event means for the checkout; Acted is false for types the
	// product does not act on (recorded and acknowledged, never delivered).
	Outcome     shop.PaymentKind
	Acted       bool
	CheckoutID  string // as the provider sent it; anything that is not a valid id is an orphan
	PaymentRef  string
	AmountCents int64
	Currency    string
	Payload     []byte // the raw body, kept for support
}

// recordAndDeliver is what every payment webhook does once its signature verified: record
// the event once in Postgres, deliver it to its saga, and mark it delivered. 2xx means
// recorded and delivered (or deliberately not delivered); 5xx asks the provider to retry,
// and the retry delivers what this attempt could not.
func (s *Server) recordAndDeliver(c echo.Context, ev verifiedEvent) error {
	checkoutID := ev.CheckoutID
	if !shop.ValidID(checkoutID) {
		checkoutID = ""
	}
	if checkoutID != "" {
		c.Set(ctxCheckoutID, checkoutID)
		c.Set(ctxWorkflowID, shop.WorkflowID(checkoutID))
	}
	ctx := c.Request().Context()
	outcome := ""
	if ev.Acted {
		outcome = string(ev.Outcome)
	}
	rec, err := s.Payments.RecordPaymentEvent(ctx, shop.PaymentEvent{
		Provider: ev.Provider, EventID: ev.EventID, Type: ev.Type, CheckoutID: checkoutID,
		PaymentRef: ev.PaymentRef, AmountCents: ev.AmountCents, Currency: ev.Currency, Outcome: outcome, Payload: ev.Payload,
	})
	switch {
	case errors.Is(err, shop.ErrUnstorableEvent):
		// Signed, but Postgres cannot store it (a NUL character, a lone surrogate, a number
		// beyond its range): no retry can change that, so say so instead of asking for one.
		return problem(http.StatusBadRequest, "invalid_payload", "event cannot be stored: it holds characters or numbers that are not allowed")
	case err != nil:
		return unavailable("postgres", err)
	case rec.Delivered:
		return c.JSON(http.StatusOK, map[string]string{"status": "duplicate"})
	}

	disposition := shop.DispositionSignalled
	switch {
	case !ev.Acted:
		disposition = shop.DispositionIgnored
	case checkoutID == "":
		disposition = shop.DispositionOrphan
	default:
		disposition, err = s.deliver(ctx, checkoutID, shop.Payment{
			Provider: ev.Provider, EventID: ev.EventID, Outcome: ev.Outcome,
			PaymentRef: ev.PaymentRef, AmountCents: ev.AmountCents, Currency: ev.Currency,
		})
		if err != nil {
			return err
		}
	}
	if disposition == shop.DispositionOrphan {
		metrics.OrphanPayments.WithLabelValues(ev.Provider, string(ev.Outcome)).Inc()
	}
	if err := s.Payments.MarkPaymentEventDelivered(ctx, ev.Provider, ev.EventID, disposition); err != nil {
		// Delivered but not marked: the retry delivers again and the saga ignores the repeat.
		return unavailable("postgres", err)
	}
	s.Logger.Info("payment event handled", "provider", ev.Provider, "event_id", ev.EventID,
		"type", ev.Type, "checkout_id", checkoutID, "disposition", disposition)
	return c.JSON(http.StatusOK, map[string]string{"status": disposition})
}

// deliver signals a payment to its saga. A payment for a checkout nobody knows yet is an
// orphan: the saga of that checkout claims it when it records the checkout (see
// store.Store.InsertCheckout), and the orphan sweeper refunds one that no checkout claims in
// time. A checkout Postgres has open whose saga is closed is settled first (settle). A
// successful payment for a checkout whose saga already finished is routed to a refund: it
// never confirms units that were released.
func (s *Server) deliver(ctx context.Context, checkoutID string, p shop.Payment) (string, error) {
	err := s.Temporal.SignalWorkflow(ctx, shop.WorkflowID(checkoutID), "", workflows.SignalPayment, p)
	switch {
	case err == nil:
		return shop.DispositionSignalled, nil
	case !isNotFound(err):
		return "", temporalProblem(err)
	}
	rec, err := s.Records.Checkout(ctx, checkoutID)
	switch {
	case errors.Is(err, shop.ErrNotFound):
		return shop.DispositionOrphan, nil
	case err != nil:
		return "", unavailable("postgres", err)
	case rec.Status == shop.RecordOpen:
		// Recorded, but its saga is closed without having recorded an end (terminated, reset
		// past its end, timed out) or gone: it will never take this payment. Settle the
		// checkout now, as the stock reconciler would: it ends, its holds go back, and its
		// payments, this one included, are routed to refunds.
		if rec, err = s.settle(ctx, checkoutID); err != nil {
			return "", err
		}
	}
	switch {
	case rec.Status == shop.RecordOpen:
		// Its saga may still act after all (Temporal said so to the settlement): never
		// refund money an open checkout may take; the orphan sweep waits for it.
		return shop.DispositionOrphan, nil
	case p.Outcome != shop.PaymentSucceeded:
		return shop.DispositionIgnored, nil // a failure for a finished checkout changes nothing
	case rec.Status == string(shop.StatusConfirmed) && rec.OrderID != "" && s.paidBy(ctx, rec, p):
		return shop.DispositionIgnored, nil // the payment that confirmed it, redelivered late
	}
	if err := s.startRefund(ctx, rec, p, "payment arrived after the checkout ended as "+rec.Status); err != nil {
		return "", err
	}
	return shop.DispositionLate, nil
}

// settle runs the settlement of a checkout whose saga is closed without an end
// (workflows.SettleCheckout), or joins the one in progress, waits for it and answers the
// record it leaves. The request's deadline bounds the wait; past it the answer is 503, the
// provider retries, and the settlement goes on meanwhile.
func (s *Server) settle(ctx context.Context, checkoutID string) (shop.CheckoutRecord, error) {
	run, err := s.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       workflows.SettleWorkflowID(checkoutID),
		TaskQueue:                workflows.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:            "Settle checkout " + checkoutID + ", whose saga closed without an end",
	}, workflows.SettleCheckout, checkoutID)
	if err != nil {
		return shop.CheckoutRecord{}, temporalProblem(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		return shop.CheckoutRecord{}, temporalProblem(err)
	}
	rec, err := s.Records.Checkout(ctx, checkoutID)
	if err != nil {
		return shop.CheckoutRecord{}, unavailable("postgres", err)
	}
	return rec, nil
}

// paidBy reports whether p is the payment recorded on the checkout's order.
func (s *Server) paidBy(ctx context.Context, rec shop.CheckoutRecord, p shop.Payment) bool {
	ref, err := s.Records.OrderPaymentRef(ctx, rec.CheckoutID)
	return err == nil && ref == p.PaymentRef
}

// startRefund starts the Refund workflow of a payment; its id is derived from the payment, so
// a redelivered event or a saga that started it already never causes a second refund.
func (s *Server) startRefund(ctx context.Context, rec shop.CheckoutRecord, p shop.Payment, reason string) error {
	in := workflows.RefundOf(rec.CheckoutID, rec.CustomerID, p, reason)
	_, err := s.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    workflows.RefundWorkflowID(in.Provider, in.PaymentRef),
		TaskQueue:             workflows.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: workflows.RefundAttributes(in),
		StaticSummary:         "Refund late payment " + p.PaymentRef + " of checkout " + rec.CheckoutID,
	}, workflows.Refund, in)
	if err != nil && !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return temporalProblem(err)
	}
	return nil
}

// verifyStripe accepts a signature made with any of the configured secrets, so a secret can
// be rotated without dropping events, and made within the tolerance of now, before or after.
// stripe-go judges only the age: a signature made for a later time would verify until then
// plus the tolerance, so a captured one could be replayed for as long as its maker chose.
func (s *Server) verifyStripe(payload []byte, header string) bool {
	tolerance := s.cfg.StripeWebhookTolerance
	if tolerance == 0 {
		tolerance = DefaultWebhookTolerance
	}
	if at, ok := stripeSignedAt(header); !ok || time.Until(at) > tolerance {
		return false
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

// stripeSignedAt is the time a Stripe-Signature header says it was signed (t=), read as
// stripe-go reads it: comma-separated key=value pairs, the last t winning, since that is the
// one its signature check signs with. false without a t that parses.
func stripeSignedAt(header string) (time.Time, bool) {
	var at time.Time
	found := false
	for _, pair := range strings.Split(header, ",") {
		key, value, _ := strings.Cut(pair, "=")
		if key != "t" {
			continue
		}
		sec, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return time.Time{}, false
		}
		at, found = time.Unix(sec, 0), true
	}
	return at, found
}
