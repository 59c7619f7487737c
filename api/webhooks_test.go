package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// stripeEvent renders a Stripe event; metadata may be nil.
func stripeEvent(id, typ string, metadata map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": typ, "api_version": "2025-03-31.basil",
		"data": map[string]any{"object": map[string]any{
			"id": "pi_" + id, "object": "payment_intent", "amount": 219800, "amount_received": 219800,
			"currency": "usd", "metadata": metadata,
		}},
	})
	return b
}

func sign(payload []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header
}

// eventRows counts payment_events rows, all of them or those of one event id.
func (h *harness) eventRows(t *testing.T, eventID string) int {
	t.Helper()
	var n int
	q, args := `SELECT count(*) FROM payment_events`, []any{}
	if eventID != "" {
		q, args = q+` WHERE provider = 'stripe' AND event_id = $1`, []any{eventID}
	}
	if err := h.pool.QueryRow(t.Context(), q, args...).Scan(&n); err != nil {
		t.Fatalf("count payment events: %v", err)
	}
	return n
}

func (h *harness) disposition(t *testing.T, eventID string) (disposition string, delivered bool, checkoutID *string) {
	t.Helper()
	var deliveredAt *time.Time
	if err := h.pool.QueryRow(t.Context(),
		`SELECT disposition, delivered_at, checkout_id FROM payment_events WHERE provider = 'stripe' AND event_id = $1`, eventID).
		Scan(&disposition, &deliveredAt, &checkoutID); err != nil {
		t.Fatalf("read event %s: %v", eventID, err)
	}
	return disposition, deliveredAt != nil, checkoutID
}

func TestStripeWebhookRefusesBadSignaturesAndRecordsNothing(t *testing.T) {
	h := newHarness(t, nil)
	now := time.Now()
	ev := stripeEvent(testenv.RandomID("evt_"), "payment_intent.succeeded", map[string]string{"checkout_id": "c-1"})
	tampered := bytes.Replace(ev, []byte(`"amount":219800`), []byte(`"amount":1`), 1)
	if bytes.Equal(ev, tampered) {
		t.Fatal("tampering changed nothing")
	}
	notJSON := []byte("this is not json")
	noID := []byte(`{"type":"charge.succeeded","data":{"object":{}}}`)
	badMetadata := []byte(`{"id":"evt_x","type":"charge.succeeded","data":{"object":{"metadata":"oops"}}}`)

	tests := []struct {
		name      string
		payload   []byte
		signature string
		code      string
	}{
		{"no signature", ev, "", "invalid_signature"},
		{"garbage header", ev, "nonsense", "invalid_signature"},
		{"no v1 value", ev, "t=" + time.Now().Format("20060102"), "invalid_signature"},
		{"unknown secret", ev, sign(ev, "whsec_c", now), "invalid_signature"},
		{"tampered body", tampered, sign(ev, "whsec_a", now), "invalid_signature"},
		{"signature of another body with the rotated secret", tampered, sign(ev, "whsec_b", now), "invalid_signature"},
		{"stale timestamp", ev, sign(ev, "whsec_a", now.Add(-10*time.Minute)), "invalid_signature"},
		{"stale timestamp, second secret", ev, sign(ev, "whsec_b", now.Add(-10*time.Minute)), "invalid_signature"},
		// stripe-go judges only a signature's age: one made for a time 10 minutes ahead would
		// verify until then plus the tolerance.
		{"timestamp 10 minutes ahead", ev, sign(ev, "whsec_a", now.Add(10*time.Minute)), "invalid_signature"},
		{"timestamp 10 minutes ahead, second secret", ev, sign(ev, "whsec_b", now.Add(10*time.Minute)), "invalid_signature"},
		{"timestamp a day ahead", ev, sign(ev, "whsec_a", now.Add(24*time.Hour)), "invalid_signature"},
		{"signed but not JSON", notJSON, sign(notJSON, "whsec_a", now), "invalid_payload"},
		{"signed event without an id", noID, sign(noID, "whsec_b", now), "invalid_payload"},
		{"signed event with malformed metadata", badMetadata, sign(badMetadata, "whsec_a", now), "invalid_payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tt.signature != "" {
				hdr["Stripe-Signature"] = tt.signature
			}
			rec := h.do(t, request{method: http.MethodPost, path: "/v1/webhooks/stripe", body: bytes.NewReader(tt.payload), header: hdr})
			problemOf(t, rec, http.StatusBadRequest, tt.code)
			if n := h.eventRows(t, ""); n != 0 {
				t.Errorf("payment_events has %d rows after a refused event, want 0", n)
			}
		})
	}
}

func TestStripeWebhookRecordsEventsThatNeedNoSaga(t *testing.T) {
	h := newHarness(t, nil)
	post := func(t *testing.T, payload []byte, secret string) map[string]string {
		t.Helper()
		rec := h.do(t, request{method: http.MethodPost, path: "/v1/webhooks/stripe", body: bytes.NewReader(payload),
			header: map[string]string{"Stripe-Signature": sign(payload, secret, time.Now())}})
		if rec.Code != http.StatusOK {
			t.Fatalf("status = %d, want 200; body %s", rec.Code, rec.Body)
		}
		var out map[string]string
		decodeJSON(t, rec, &out)
		return out
	}

	t.Run("ignored type signed with the rotated secret", func(t *testing.T) {
		id := testenv.RandomID("evt_")
		ev := stripeEvent(id, "charge.succeeded", map[string]string{"checkout_id": "c-1"})
		if got := post(t, ev, "whsec_b"); got["status"] != "ignored" {
			t.Errorf("response = %v, want status ignored", got)
		}
		disp, delivered, _ := h.disposition(t, id)
		if disp != "ignored" || !delivered {
			t.Errorf("row: disposition %q delivered %v, want ignored and delivered", disp, delivered)
		}
	})

	t.Run("payment without checkout_id is an orphan; a repeat is a duplicate", func(t *testing.T) {
		id := testenv.RandomID("evt_")
		ev := stripeEvent(id, "payment_intent.succeeded", nil)
		if got := post(t, ev, "whsec_a"); got["status"] != "orphan" {
			t.Errorf("response = %v, want status orphan", got)
		}
		disp, delivered, checkoutID := h.disposition(t, id)
		if disp != "orphan" || !delivered || checkoutID != nil {
			t.Errorf("row: disposition %q delivered %v checkout %v, want orphan, delivered, no checkout", disp, delivered, checkoutID)
		}
		// Stripe redelivers with a fresh signature, possibly under the other secret.
		for _, secret := range []string{"whsec_a", "whsec_b"} {
			if got := post(t, ev, secret); got["status"] != "duplicate" {
				t.Errorf("repeat signed with %s: response = %v, want status duplicate", secret, got)
			}
		}
		if n := h.eventRows(t, id); n != 1 {
			t.Errorf("event %s has %d rows, want 1", id, n)
		}
		if disp, _, _ := h.disposition(t, id); disp != "orphan" {
			t.Errorf("disposition after repeats = %q, want orphan", disp)
		}
	})

	t.Run("signed by a clock a minute ahead, within the tolerance", func(t *testing.T) {
		id := testenv.RandomID("evt_")
		ev := stripeEvent(id, "charge.succeeded", nil)
		rec := h.do(t, request{method: http.MethodPost, path: "/v1/webhooks/stripe", body: bytes.NewReader(ev),
			header: map[string]string{"Stripe-Signature": sign(ev, "whsec_a", time.Now().Add(time.Minute))}})
		if rec.Code != http.StatusOK {
			t.Errorf("status = %d, want 200; body %s", rec.Code, rec.Body)
		}
	})

	t.Run("payment whose checkout_id is not an id is an orphan", func(t *testing.T) {
		id := testenv.RandomID("evt_")
		ev := stripeEvent(id, "payment_intent.payment_failed", map[string]string{"checkout_id": "c 1/../x"})
		if got := post(t, ev, "whsec_a"); got["status"] != "orphan" {
			t.Errorf("response = %v, want status orphan", got)
		}
		if disp, _, checkoutID := h.disposition(t, id); disp != "orphan" || checkoutID != nil {
			t.Errorf("row: disposition %q checkout %v, want orphan with no checkout", disp, checkoutID)
		}
	})
}

// A live endpoint refuses Stripe's test-mode events: signed, but by a test endpoint's secret
// listed beside the live one, and a test card costs nothing. Nothing is recorded; a live
// event with the same signing goes through.
func TestALiveEndpointRefusesTestModeEvents(t *testing.T) {
	h := newHarness(t, func(c *api.Config, _ *api.Deps) { c.StripeLiveOnly = true })
	post := func(payload []byte) *httptest.ResponseRecorder {
		return h.do(t, request{method: http.MethodPost, path: "/v1/webhooks/stripe", body: bytes.NewReader(payload),
			header: map[string]string{"Stripe-Signature": sign(payload, "whsec_a", time.Now())}})
	}
	test := testenv.RandomID("evt_")
	rec := post(stripeEvent(test, "payment_intent.succeeded", nil))
	problemOf(t, rec, http.StatusBadRequest, "test_mode_event")
	if n := h.eventRows(t, test); n != 0 {
		t.Errorf("%d rows recorded for a refused test-mode event", n)
	}
	live := testenv.RandomID("evt_")
	var ev map[string]any
	_ = json.Unmarshal(stripeEvent(live, "charge.succeeded", nil), &ev)
	ev["livemode"] = true
	b, _ := json.Marshal(ev)
	if rec := post(b); rec.Code != http.StatusOK {
		t.Errorf("live event: %d %s, want 200", rec.Code, rec.Body)
	}
}
