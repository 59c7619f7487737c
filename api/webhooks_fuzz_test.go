package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/openapitest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/store"
)

// The fuzz tests run their seed corpus (f.Add and testdata/fuzz) as ordinary tests in CI; run
// one for real with `go test -run XXX -fuzz FuzzStripeWebhook -fuzztime 30s ./api/`.
//
// Each input is sent in one of three ways: as it is (unsigned or with whatever signature the
// input carries), correctly signed, or signed wrongly (an unknown secret or a stale
// timestamp). No input may panic or get a 5xx; nothing unsigned or wrongly signed may add a
// payment_events row or reach Temporal. A correctly signed input may be recorded (one row at
// most) and is delivered to a Temporal stand-in for which every saga is gone, so the handler
// runs to the end (orphan, ignored or late) without a server.
//
// testdata/fuzz holds the inputs that failed before: signed events Postgres cannot db (a
// \u0000 escape, a lone surrogate, a number beyond numeric's range, invalid UTF-8) were answered
// 503, so the provider would have retried them for days; they are now 400 invalid_payload.

// Secrets of the fuzzed endpoints.
const (
	fuzzStripeSecret = "whsec_fuzz_stripe"
	fuzzProvider     = "acme-pay"
)

var (
	fuzzStandardSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("fuzz-standard-key-0123456789abcdef"))
	fuzzOtherSecret    = "whsec_" + base64.StdEncoding.EncodeToString([]byte("not-the-configured-key-0123456789"))
)

// goneTemporal is a Temporal client for which every saga has finished and been deleted: a
// signal finds no workflow, and a refund start is accepted. Any other call reaches the nil
// embedded client and panics, which the server answers 500 and the fuzz test reports.
type goneTemporal struct {
	client.Client
	calls atomic.Int64
}

func (g *goneTemporal) SignalWorkflow(context.Context, string, string, string, any) error {
	g.calls.Add(1)
	return serviceerror.NewNotFound("workflow not found")
}

func (g *goneTemporal) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	g.calls.Add(1)
	return nil, nil
}

type fuzzServer struct {
	e        *echo.Echo
	pool     *pgxpool.Pool
	temporal *goneTemporal
}

// newFuzzServer is the API on a fresh Postgres database with an empty catalog (every cart
// that passes validation is answered 422 unknown_sku before any saga would start), no
// sold-out gate, and goneTemporal.
func newFuzzServer(f *testing.F) *fuzzServer {
	f.Helper()
	_, pool := testenv.Postgres(f)
	db := store.New(pool)
	temporal := &goneTemporal{}
	e := api.New(api.Config{
		AdminToken:                   testAdminToken,
		StripeWebhookSecrets:         []string{fuzzStripeSecret},
		StandardWebhookSecrets:       map[string][]string{fuzzProvider: {fuzzStandardSecret}},
		DefaultPaymentTimeoutSeconds: 900,
		TemporalUIURL:                "http://localhost:8233",
	}, api.Deps{
		Temporal: temporal, Catalog: db, Records: db, Payments: db,
		Inventory: &inventory.Inventory{Store: db, Stock: nil},
		Logger:    slog.New(slog.DiscardHandler),
	})
	return &fuzzServer{e: e, pool: pool, temporal: temporal}
}

func (s *fuzzServer) post(t *testing.T, path string, payload []byte, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/json") // as providers send their events
	for k, vs := range header {
		req.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	openapitest.Handler(t, s.e).ServeHTTP(rec, req) // checked against api/openapi.json
	return rec
}

func (s *fuzzServer) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM payment_events`).Scan(&n); err != nil {
		t.Fatalf("count payment events: %v", err)
	}
	return n
}

// How a fuzz input is sent.
const (
	sendAsIs = iota
	sendSigned
	sendBadlySigned
)

// check asserts the invariants of one webhook request.
func (s *fuzzServer) check(t *testing.T, mode int, rowsBefore int, callsBefore int64, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	added, calls := s.rows(t)-rowsBefore, s.temporal.calls.Load()-callsBefore
	if mode == sendSigned {
		if added > 1 || added == 1 && rec.Code != http.StatusOK {
			t.Fatalf("signed event: status %d and %d rows added; want at most one row, and only with a 200", rec.Code, added)
		}
		return
	}
	if rec.Code < 400 {
		t.Fatalf("%s input answered %d: %s", [...]string{"unsigned", "", "badly signed"}[mode], rec.Code, rec.Body)
	}
	if added != 0 || calls != 0 {
		t.Fatalf("refused input (status %d) added %d payment_events rows and made %d Temporal calls; want none", rec.Code, added, calls)
	}
}

func FuzzStripeWebhook(f *testing.F) {
	s := newFuzzServer(f)
	now := time.Now().Unix()
	valid := `{"id":"evt_fz1","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount":1999,"amount_received":1999,"currency":"usd","metadata":{"checkout_id":"c-fz1"}}}}`
	seeds := []struct {
		payload string
		header  string
		mode    int
	}{
		{valid, "", sendSigned},
		{valid, "", sendAsIs},
		{valid, "", sendBadlySigned},
		{valid, "t=" + strconv.FormatInt(now, 10) + ",v1=" + "00", sendAsIs},
		{valid, "t=abc,v1=zz,v0=1", sendAsIs},
		{valid, "v1=,t=", sendAsIs},
		{`{"id":"evt_fz2","type":"payment_intent.payment_failed","data":{"object":{"id":"pi_2","metadata":{"checkout_id":"c-fz2"}}}}`, "", sendSigned},
		{`{"id":"evt_fz3","type":"payment_intent.canceled","data":{"object":{"metadata":{"checkout_id":"../../etc"}}}}`, "", sendSigned},
		{`{"id":"evt_fz4","type":"charge.refunded","data":{"object":{}}}`, "", sendSigned},
		{`{"id":"evt_fz5","type":"payment_intent.succeeded","data":{"object":{"metadata":null}}}`, "", sendSigned},
		{`{"id":"evt_fz6","type":"payment_intent.succeeded","data":{"object":{"metadata":"oops"}}}`, "", sendSigned},
		{`{"id":"evt_fz7","type":"payment_intent.succeeded","data":{"object":{"amount":-5,"currency":"USD"}}}`, "", sendSigned},
		{`{"id":"","type":""}`, "", sendSigned},
		{`[]`, "", sendSigned},
		{`null`, "", sendSigned},
		{``, "", sendSigned},
		{`not json`, "", sendAsIs},
		{`{"id":"evt_fz11","type":"payment_intent.succeeded","data":{"object":{"amount":99999999999999999999}}}`, "", sendSigned},
	}
	for _, sd := range seeds {
		f.Add([]byte(sd.payload), sd.header, uint8(sd.mode))
	}
	f.Fuzz(func(t *testing.T, payload []byte, header string, modeByte uint8) {
		mode := int(modeByte % 3)
		switch mode {
		case sendSigned:
			header = sign(payload, fuzzStripeSecret, time.Now())
		case sendBadlySigned:
			if modeByte%2 == 0 {
				header = sign(payload, "whsec_unknown", time.Now())
			} else {
				header = sign(payload, fuzzStripeSecret, time.Now().Add(-time.Hour))
			}
		}
		rows, calls := s.rows(t), s.temporal.calls.Load()
		rec := s.post(t, "/v1/webhooks/stripe", payload, http.Header{"Stripe-Signature": {header}})
		s.check(t, mode, rows, calls, rec)
	})
}

func FuzzStandardWebhook(f *testing.F) {
	s := newFuzzServer(f)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	valid := `{"type":"payment.succeeded","data":{"payment_id":"pay_1","checkout_id":"c-fz1","amount_cents":1999,"currency":"usd"}}`
	seeds := []struct {
		provider, id, timestamp, signature, payload string
		mode                                        int
	}{
		{fuzzProvider, "msg_1", now, "", valid, sendSigned},
		{fuzzProvider, "msg_1", now, "", valid, sendAsIs},
		{fuzzProvider, "msg_1", now, "", valid, sendBadlySigned},
		{fuzzProvider, "msg_1", now, "v1,AAAA", valid, sendAsIs},
		{fuzzProvider, "msg_1", now, "v1,", valid, sendAsIs},
		{fuzzProvider, "msg_1", now, "v1a,xyz v2,abc ,", valid, sendAsIs},
		{fuzzProvider, "", "", "", valid, sendAsIs},
		{fuzzProvider, "msg_1", "-1", "", valid, sendSigned},
		{fuzzProvider, "msg_1", "+" + now, "", valid, sendSigned},
		{fuzzProvider, "msg_1", "99999999999999999999", "", valid, sendSigned},
		{fuzzProvider, "msg 1", now, "", valid, sendSigned},
		{fuzzProvider, "msg_\x00", now, "", valid, sendSigned},
		{fuzzProvider, "msg_\xff", now, "", valid, sendSigned},
		{"stripe", "msg_1", now, "", valid, sendSigned},
		{"unknown", "msg_1", now, "", valid, sendSigned},
		{"", "msg_1", now, "", valid, sendSigned},
		{"acme pay/../x", "msg_1", now, "", valid, sendSigned},
		{fuzzProvider, "msg_2", now, "", `{"type":"payment.failed","data":{"payment_id":"pay_2","checkout_id":"c-fz2"}}`, sendSigned},
		{fuzzProvider, "msg_3", now, "", `{"type":"payment.canceled","data":{"payment_id":"pay_3"}}`, sendSigned},
		{fuzzProvider, "msg_4", now, "", `{"type":"payment.succeeded","data":{"checkout_id":"c-fz4"}}`, sendSigned},
		{fuzzProvider, "msg_5", now, "", `{"type":"invoice.created","data":{}}`, sendSigned},
		{fuzzProvider, "msg_7", now, "", `{"type":"payment.succeeded","data":{"payment_id":"p","amount_cents":1.5}}`, sendSigned},
		{fuzzProvider, "msg_8", now, "", `{"type":"payment.succeeded","data":"x"}`, sendSigned},
		{fuzzProvider, "msg_11", now, "", `{}`, sendSigned},
		{fuzzProvider, "msg_12", now, "", ``, sendSigned},
	}
	for _, sd := range seeds {
		f.Add(sd.provider, sd.id, sd.timestamp, sd.signature, []byte(sd.payload), uint8(sd.mode))
	}
	signers := map[string]*standardwebhooks.Webhook{}
	for _, secret := range []string{fuzzStandardSecret, fuzzOtherSecret} {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			f.Fatal(err)
		}
		signers[secret] = wh
	}
	f.Fuzz(func(t *testing.T, provider, id, timestamp, signature string, payload []byte, modeByte uint8) {
		mode := int(modeByte % 3)
		signWith := func(secret string, at time.Time) {
			// The library signs over the time it is given, so the header carries that time.
			signature, _ = signers[secret].Sign(id, at, payload)
			timestamp = strconv.FormatInt(at.Unix(), 10)
		}
		switch {
		case mode == sendSigned:
			signWith(fuzzStandardSecret, time.Now())
		case mode == sendBadlySigned && modeByte%2 == 0:
			signWith(fuzzOtherSecret, time.Now())
		case mode == sendBadlySigned:
			signWith(fuzzStandardSecret, time.Now().Add(-10*time.Minute))
		}
		header := http.Header{}
		header[http.CanonicalHeaderKey(standardwebhooks.HeaderWebhookID)] = []string{id}
		header[http.CanonicalHeaderKey(standardwebhooks.HeaderWebhookTimestamp)] = []string{timestamp}
		header[http.CanonicalHeaderKey(standardwebhooks.HeaderWebhookSignature)] = []string{signature}
		rows, calls := s.rows(t), s.temporal.calls.Load()
		rec := s.post(t, "/v1/webhooks/standard/"+url.PathEscape(provider), payload, header)
		s.check(t, mode, rows, calls, rec)
	})
}

func TestParseStandardWebhookSecrets(t *testing.T) {
	key := func(s string) string { return "whsec_" + base64.StdEncoding.EncodeToString([]byte(s)) }
	a, b, c := key("key-a-0123456789abcdef"), key("key-b-0123456789abcdef"), key("key-c-0123456789abcdef")
	got, err := api.ParseStandardWebhookSecrets(" acme-pay=" + a + ", acme-pay=" + b + ",other_pay=" + c + ",")
	if err != nil {
		t.Fatalf("valid secrets: %v", err)
	}
	if len(got) != 2 || len(got["acme-pay"]) != 2 || got["acme-pay"][1] != b || got["other_pay"][0] != c {
		t.Errorf("parsed %v", got)
	}
	if got, err := api.ParseStandardWebhookSecrets(""); err != nil || len(got) != 0 {
		t.Errorf("empty: %v %v, want no providers and no error", got, err)
	}
	for _, bad := range []string{
		"acme-pay",                      // no secret
		"acme-pay=",                     // empty secret
		"Acme=" + a,                     // upper case
		"stripe=" + a,                   // has its own endpoint
		"acme-pay=whsec_not base64!",    // not base64
		"acme-pay=" + key("short"),      // key too short
		"acme-pay=" + a[len("whsec_"):], // no prefix
	} {
		if _, err := api.ParseStandardWebhookSecrets(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}
