// The checkout as the API returns it: the public view, its reason, a reservation's answer.

package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// CheckoutView is the checkout as the API returns it (the contract's view).
type CheckoutView struct {
	CheckoutID  string      `json:"checkout_id"`
	WorkflowID  string      `json:"workflow_id"`
	Status      shop.Status `json:"status"`
	CustomerID  string      `json:"customer_id"`
	Currency    string      `json:"currency"`
	AmountCents int64       `json:"amount_cents"`
	Items       []shop.Item `json:"items"`
	ExpiresAt   *time.Time  `json:"expires_at"`
	OrderID     *string     `json:"order_id"`
	// Reason is human text for the buyer; ReasonCode is its stable code (see publicReason).
	Reason         *string `json:"reason"`
	ReasonCode     *string `json:"reason_code,omitempty"`
	NeedsAttention bool    `json:"needs_attention"`
	// Attention is a fixed sentence in the public view; support reads the step and its error
	// in the saga (Temporal UI, status query).
	Attention string          `json:"attention,omitempty"`
	Refunds   []string        `json:"refunds,omitempty"`
	Shortages []shop.Shortage `json:"shortages,omitempty"`
	Links     Links           `json:"links"`
	// Paused says the checkout's saga is paused by support: the view is the checkout's record
	// in Postgres, and it moves again once support unpauses it.
	Paused bool `json:"paused,omitempty"`
	// CheckoutSecret is in the answers to the POST that created the checkout and to its
	// retries, only: the buyer sends it back as the Checkout-Secret header to read or cancel.
	CheckoutSecret string `json:"checkout_secret,omitempty"`
}

// Links point at the checkout in the API and in the Temporal Web UI.
type Links struct {
	Self       string `json:"self"`
	TemporalUI string `json:"temporal_ui"`
}

func (s *Server) present(v shop.View) CheckoutView {
	if v.Items == nil {
		v.Items = []shop.Item{}
	}
	code, reason := publicReason(v)
	attention := ""
	if v.NeedsAttention {
		attention = "support has been told and is looking into this checkout"
	}
	if v.Paused {
		attention = "support paused this checkout; this is its last recorded state, and it continues when support resumes it"
	}
	return CheckoutView{
		CheckoutID: v.CheckoutID, WorkflowID: v.WorkflowID, Status: v.Status, CustomerID: v.CustomerID,
		Currency: v.Currency, AmountCents: v.AmountCents, Items: v.Items, ExpiresAt: v.ExpiresAt,
		OrderID: v.OrderID, Reason: reason, ReasonCode: code, NeedsAttention: v.NeedsAttention, Attention: attention,
		Refunds: v.Refunds, Shortages: v.Shortages, Paused: v.Paused,
		Links: Links{
			Self:       "/v1/checkouts/" + v.CheckoutID,
			TemporalUI: fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimRight(s.cfg.TemporalUIURL, "/"), s.cfg.Namespace, v.WorkflowID),
		}}
}

// publicReason is the view's reason as a client may read it: a stable code, and human text
// that never carries an internal error (a failed step's error goes to support, in the saga).
// The saga's own texts for the ordinary ends (who cancelled, until when the buyer could pay,
// which payment failed or did not match) are kept.
func publicReason(v shop.View) (code, text *string) {
	if v.Reason == nil {
		return nil, nil
	}
	c, t := "", *v.Reason
	switch v.Status {
	case shop.StatusOutOfStock:
		switch t {
		case shop.RejectCustomerLimit:
			c, t = t, "the cart would take this customer over a SKU's per-customer limit"
		case shop.RejectTooManyOpen:
			c, t = t, "this customer already had the most open checkouts allowed"
		default:
			c, t = "out_of_stock", "some items could not be held"
		}
	case shop.StatusExpired:
		c = "payment_window_expired"
	case shop.StatusCancelled:
		c = "cancelled"
	case shop.StatusPaymentFailed:
		c = "payment_failed"
	case shop.StatusFailed:
		c, t = "checkout_failed", "the checkout could not be completed; nothing is held and support has been told"
		if *v.Reason == shop.ReasonUnsettled { // its units may still be held until it is settled
			t = "the checkout could not be completed; what it holds is being released, any payment refunded, and support has been told"
		}
	case shop.StatusConfirmed:
		c = "confirmed"
	default: // open: a payment that did not match, being refunded
		c = "payment_mismatch"
	}
	return &c, &t
}

// rejections are the answers to a checkout refused at reservation, by the saga's reject
// code, but for out of stock (answerReservation adds the shortages).
var rejections = map[string]struct {
	status       int
	code, detail string
}{
	shop.RejectOverLimit:     {http.StatusUnprocessableEntity, "quantity_over_limit", "a quantity is over its SKU's per-order limit"},
	shop.RejectUnknownSKU:    {http.StatusUnprocessableEntity, "unknown_sku", "the cart names a SKU that does not exist"},
	shop.RejectMixedCurrency: {http.StatusUnprocessableEntity, "mixed_currency", "the cart's SKUs are priced in different currencies"},
	shop.RejectCustomerLimit: {http.StatusConflict, "customer_limit", "the cart would take this customer over a SKU's per-customer limit; nothing was held"},
	// No Retry-After: this cart stays refused. The customer pays for or cancels an open
	// checkout, then starts again with a new cart_id.
	shop.RejectTooManyOpen: {http.StatusTooManyRequests, "too_many_open_checkouts",
		"this customer already has the most open checkouts allowed; pay for or cancel one, then start again with a new cart_id"},
}

// rejectCode is the refusal a reservation answers with: the saga's code, or for a retry of a
// cart whose saga already ended refused (no code, status out_of_stock) the same refusal as
// the first time.
func rejectCode(code string, v shop.View) string {
	if code != "" || v.Status != shop.StatusOutOfStock {
		return code
	}
	if v.Reason != nil && (*v.Reason == shop.RejectCustomerLimit || *v.Reason == shop.RejectTooManyOpen) {
		return *v.Reason
	}
	return shop.RejectOutOfStock
}

// failedProblem is the answer of a checkout that failed for good: a 500 with a stable code,
// its reason kept for the log only.
func failedProblem(v shop.View) *Problem {
	detail := "the checkout could not be completed and nothing is held; start again with a new cart_id"
	if v.Reason != nil && *v.Reason == shop.ReasonUnsettled {
		detail = "the checkout could not be completed; what it holds is being released; start again with a new cart_id"
	}
	p := problem(http.StatusInternalServerError, "checkout_failed", detail)
	if v.Reason != nil {
		p.cause = errors.New(*v.Reason) // for the log; clients get the stable code
	}
	return p
}

// answerReservation maps the saga's reservation outcome to the contract's responses. The
// checkout's secret goes to the request that created it and to retries under its
// Idempotency-Key: the same body under another key knows the cart, which is not enough. door
// is what the door read of the cart a moment before: whether Postgres recorded its end, and
// its secret's version.
func (s *Server) answerReservation(c echo.Context, res workflows.ReservationResult, key string, door doorFacts) error {
	v := res.View
	if !res.Created && res.RejectCode == "" && !v.Status.Final() {
		v = s.withRecordedEnd(c.Request().Context(), v, door.ended) // a run reset to before its end
	}
	reject := rejectCode(res.RejectCode, v)
	if reject == shop.RejectOutOfStock {
		metrics.SoldOut.Inc()
		p := problem(http.StatusConflict, "out_of_stock", "some items cannot be held; nothing was held")
		p.Shortages = v.Shortages
		return p
	}
	if r, ok := rejections[reject]; ok {
		return problem(r.status, r.code, r.detail)
	}
	if v.Status == shop.StatusFailed {
		return failedProblem(v)
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/checkouts/"+v.CheckoutID)
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	view := s.present(v)
	if res.Created || res.IdempotencyKey == key {
		view.CheckoutSecret = s.secrets.sign(v.CheckoutID, door.secretVersion)
	}
	return c.JSON(status, view)
}
