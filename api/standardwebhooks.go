package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Payment providers other than Stripe sign their webhooks the Standard Webhooks way
// (https://www.standardwebhooks.com): headers webhook-id, webhook-timestamp and
// webhook-signature, the signature being space-separated "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>" values made with a "whsec_<base64 key>" secret. Verification is the
// specification's own Go library; it checks the timestamp against a fixed five minutes, so the
// timestamp is checked here instead (configurable tolerance, both directions) and the library
// is asked only about the signature.

// DefaultStandardWebhookTolerance is how far a webhook-timestamp may be from now, either way:
// the specification's recommendation, which bounds how long a captured request can be replayed.
const DefaultStandardWebhookTolerance = 300 * time.Second

// standardProviderPattern is a provider's name in the route and in payment_events: short,
// lower case, safe in a URL, a log line and a workflow id.
var standardProviderPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// webhookIDPattern bounds the webhook-id header, which becomes the recorded event id: visible
// ASCII only, so it is stored and logged as sent.
var webhookIDPattern = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`)

// timestampPattern is the webhook-timestamp header: Unix seconds, digits only, as signed.
var timestampPattern = regexp.MustCompile(`^[0-9]{1,12}$`)

// ParseStandardWebhookSecrets reads STANDARD_WEBHOOK_SECRETS: comma-separated
// provider=whsec_... pairs; a provider named more than once has several secrets (a rotation).
// Stripe has its own endpoint and may not be named.
func ParseStandardWebhookSecrets(raw string) (map[string][]string, error) {
	secrets := map[string][]string{}
	var errs []error
	for _, pair := range strings.Split(raw, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		provider, secret, ok := strings.Cut(pair, "=")
		provider, secret = strings.TrimSpace(provider), strings.TrimSpace(secret)
		switch {
		case !ok || secret == "":
			errs = append(errs, fmt.Errorf("%q: must be provider=whsec_<base64 key>", pair))
			continue
		case !standardProviderPattern.MatchString(provider):
			errs = append(errs, fmt.Errorf("provider %q: must be 1 to 32 lower-case letters, digits, '-' or '_'", provider))
			continue
		case provider == providerStripe:
			errs = append(errs, errors.New("provider stripe: Stripe has its own endpoint and secret (STRIPE_WEBHOOK_SECRET)"))
			continue
		}
		if _, err := standardSecretKey(secret); err != nil {
			errs = append(errs, fmt.Errorf("secret of provider %s: %w", provider, err))
			continue
		}
		secrets[provider] = append(secrets[provider], secret)
	}
	return secrets, errors.Join(errs...)
}

// standardSecretKey checks a secret the way the library reads it (base64 after "whsec_") and
// refuses keys too short to be a real HMAC key.
func standardSecretKey(secret string) (*standardwebhooks.Webhook, error) {
	if !strings.HasPrefix(secret, "whsec_") {
		return nil, errors.New("must start with whsec_")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, errors.New("must be whsec_ followed by standard base64")
	}
	if len(key) < 16 {
		return nil, fmt.Errorf("key is %d bytes; it must be at least 16", len(key))
	}
	return standardwebhooks.NewWebhook(secret)
}

// standardVerifiers are the verifiers of every configured provider's secrets.
type standardVerifiers map[string][]*standardwebhooks.Webhook

func newStandardVerifiers(secrets map[string][]string) standardVerifiers {
	v := standardVerifiers{}
	for provider, list := range secrets {
		for _, secret := range list {
			// The binary validated every secret at start (ParseStandardWebhookSecrets); a bad
			// one here only ever fails to verify.
			if wh, err := standardwebhooks.NewWebhook(secret); err == nil {
				v[provider] = append(v[provider], wh)
			}
		}
	}
	return v
}

// standardEvent is the payload contract of the Standard Webhooks endpoint (docs/payments.md).
// Unknown fields are allowed: providers add to their payloads.
type standardEvent struct {
	Type string `json:"type"`
	Data struct {
		PaymentID   string `json:"payment_id"`
		CheckoutID  string `json:"checkout_id"`
		AmountCents int64  `json:"amount_cents"`
		Currency    string `json:"currency"`
	} `json:"data"`
}

// standardOutcomes maps the event types the product acts on; other types are acknowledged.
var standardOutcomes = map[string]shop.PaymentKind{
	"payment.succeeded": shop.PaymentSucceeded,
	"payment.failed":    shop.PaymentFailed,
	"payment.canceled":  shop.PaymentCanceled,
}

// standardWebhook verifies a Standard Webhooks event on the raw body and then does what the
// Stripe endpoint does (recordAndDeliver): same recording, same delivery, same answers. The
// event id is the webhook-id header, which the specification keeps across redeliveries.
func (s *Server) standardWebhook(c echo.Context) error {
	provider := c.Param("provider")
	verifiers, ok := s.standard[provider]
	if !ok {
		return problem(http.StatusNotFound, "unknown_provider", "no webhook secret is configured for this provider")
	}
	payload, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return readError(err)
	}
	if p := s.verifyStandard(verifiers, payload, c.Request().Header); p != nil {
		return p
	}
	var ev standardEvent
	if err := json.Unmarshal(payload, &ev); err != nil || ev.Type == "" {
		return problem(http.StatusBadRequest, "invalid_payload", "event body is not a JSON object with a type")
	}
	outcome, acted := standardOutcomes[ev.Type]
	if acted && (ev.Data.PaymentID == "" || len(ev.Data.PaymentID) > maxPaymentRefLength) {
		return problem(http.StatusBadRequest, "invalid_payload", "data.payment_id: must be 1 to 255 characters for "+ev.Type)
	}
	return s.recordAndDeliver(c, verifiedEvent{
		Provider: provider, EventID: c.Request().Header.Get(standardwebhooks.HeaderWebhookID),
		Type: ev.Type, Outcome: outcome, Acted: acted, CheckoutID: ev.Data.CheckoutID,
		PaymentRef: ev.Data.PaymentID, AmountCents: ev.Data.AmountCents,
		Currency: strings.ToLower(ev.Data.Currency), Payload: payload,
	})
}

// verifyStandard checks the three headers and accepts a signature made with any of the
// provider's secrets, so a secret can be rotated without dropping events.
func (s *Server) verifyStandard(verifiers []*standardwebhooks.Webhook, payload []byte, h http.Header) *Problem {
	bad := func(detail string) *Problem { return problem(http.StatusBadRequest, "invalid_signature", detail) }
	id := h.Get(standardwebhooks.HeaderWebhookID)
	ts := h.Get(standardwebhooks.HeaderWebhookTimestamp)
	if !webhookIDPattern.MatchString(id) {
		return bad("webhook-id: must be 1 to 255 visible ASCII characters")
	}
	if !timestampPattern.MatchString(ts) {
		return bad("webhook-timestamp: must be Unix seconds")
	}
	sec, _ := strconv.ParseInt(ts, 10, 64) // 12 digits at most: cannot overflow
	tolerance := s.cfg.StandardWebhookTolerance
	if tolerance <= 0 {
		tolerance = DefaultStandardWebhookTolerance
	}
	if age := time.Since(time.Unix(sec, 0)); age > tolerance || age < -tolerance {
		return bad("webhook-timestamp: too old or too far in the future")
	}
	for _, wh := range verifiers {
		if wh.VerifyIgnoringTimestamp(payload, h) == nil {
			return nil
		}
	}
	return bad("webhook-signature does not verify")
}
