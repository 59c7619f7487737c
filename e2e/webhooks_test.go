package e2e

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// webhookCase is one row of the end-to-end webhook table. The harness opens a checkout (unless
// noCheckout), runs send, then waits until Postgres shows wantState and the fake Stripe shows
// wantRefunds, and checks the checkout's payment_events rows.
type webhookCase struct {
	name           string
	paymentTimeout int64 // seconds; 600 unless set
	noCheckout     bool
	// send delivers the case's events and returns the status of each delivery and the
	// payment intents the events named (their refunds are counted).
	send             func(t *testing.T, s *payStack, id string) (codes []int, intents []string)
	wantCodes        []int
	wantDispositions []string // of the checkout's payment_events rows, oldest first; all delivered
	wantState        string   // Postgres status at the end ("" = no checkout row)
	wantRefunds      int
	check            func(t *testing.T, s *payStack, id string) // extra assertions
}

// TestWebhooksAreVerifiedRecordedOnceAndReachTheirSaga runs every webhook case end to end over HTTP on one dev server: real
// Postgres, Redis and Temporal, the worker refunding through a local scripted Stripe API.
func TestWebhooksAreVerifiedRecordedOnceAndReachTheirSaga(t *testing.T) {
	t.Parallel()
	started := time.Now()
	s := newPayStack(t)
	t.Logf("stack up in %s", time.Since(started).Round(time.Millisecond))

	confirmedOnce := func(t *testing.T, s *payStack, id string) {
		t.Helper()
		if _, orders := s.pgStatus(t, id); orders != 1 {
			t.Errorf("checkout %s has %d orders, want 1", id, orders)
		}
		if n := s.paymentSignals(t, id); n != 1 {
			t.Errorf("checkout %s got %d payment signals, want 1", id, n)
		}
	}

	cases := []webhookCase{
		{
			name: "valid event confirms",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
				code, status := s.sendStripe(t, s.api, stripeEvent("evt_"+id, "payment_intent.succeeded", id, pi, unitPrice))
				if status != shop.DispositionSignalled {
					t.Errorf("answer status %q, want signalled", status)
				}
				return []int{code}, []string{pi}
			},
			wantCodes: []int{200}, wantDispositions: []string{"signalled"}, wantState: "confirmed",
			check: confirmedOnce,
		},
		{
			name: "bad signature is refused and records nothing",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice)
				code, _ := s.post(t, s.api, "/v1/webhooks/stripe", body, stripeHeader(body, "whsec_someone_else", time.Now()))
				tampered := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, 1)
				code2, _ := s.post(t, s.api, "/v1/webhooks/stripe", tampered, stripeHeader(body, stripeSecretNew, time.Now()))
				return []int{code, code2}, []string{"pi_" + id}
			},
			wantCodes: []int{400, 400}, wantState: "open",
			check: func(t *testing.T, s *payStack, id string) {
				if v := s.view(t, id); v.Status != shop.StatusAwaitingPayment {
					t.Errorf("status %s, want awaiting_payment", v.Status)
				}
				if n := s.paymentSignals(t, id); n != 0 {
					t.Errorf("%d payment signals, want 0", n)
				}
			},
		},
		{
			name: "stale timestamp is refused",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice)
				code, _ := s.post(t, s.api, "/v1/webhooks/stripe", body, stripeHeader(body, stripeSecretNew, time.Now().Add(-6*time.Minute)))
				return []int{code}, nil
			},
			wantCodes: []int{400}, wantState: "open",
		},
		{
			name: "event signed with the second of two secrets confirms",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice)
				code, _ := s.post(t, s.api, "/v1/webhooks/stripe", body, stripeHeader(body, stripeSecretOld, time.Now()))
				return []int{code}, nil
			},
			wantCodes: []int{200}, wantDispositions: []string{"signalled"}, wantState: "confirmed",
		},
		{
			name: "same event three times: one row, one confirmation",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice)
				var codes []int
				for range 3 {
					code, _ := s.sendStripe(t, s.api, body)
					codes = append(codes, code)
				}
				return codes, nil
			},
			wantCodes: []int{200, 200, 200}, wantDispositions: []string{"signalled"}, wantState: "confirmed",
			check: confirmedOnce,
		},
		{
			name: "failed then succeeded (same PaymentIntent) confirms",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				c1, _ := s.sendStripe(t, s.api, stripeEvent("evt_1_"+id, "payment_intent.payment_failed", id, "pi_"+id, unitPrice))
				c2, _ := s.sendStripe(t, s.api, stripeEvent("evt_2_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice))
				return []int{c1, c2}, []string{"pi_" + id}
			},
			wantCodes: []int{200, 200}, wantDispositions: []string{"signalled", "signalled"}, wantState: "confirmed",
		},
		{
			name: "succeeded then failed stays confirmed",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				c1, _ := s.sendStripe(t, s.api, stripeEvent("evt_1_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice))
				// Let the saga finish, so the failure meets a finished checkout.
				var v shop.View
				if err := s.temporal.GetWorkflow(t.Context(), shop.WorkflowID(id), "").Get(t.Context(), &v); err != nil || v.Status != shop.StatusConfirmed {
					t.Fatalf("saga ended %s (%v), want confirmed", v.Status, err)
				}
				c2, _ := s.sendStripe(t, s.api, stripeEvent("evt_2_"+id, "payment_intent.payment_failed", id, "pi_"+id, unitPrice))
				return []int{c1, c2}, []string{"pi_" + id}
			},
			// The failure reaches a finished saga: recorded, acknowledged, changes nothing.
			wantCodes: []int{200, 200}, wantDispositions: []string{"signalled", "ignored"}, wantState: "confirmed",
			check: confirmedOnce,
		},
		{
			name: "late payment after expiry is refunded once",
			// 2 s: the dev server fires timers on a one-second grain.
			paymentTimeout: 2,
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				// Expired in Postgres and its saga closed: a payment while the saga still
				// runs its ending steps is refunded by the saga (signalled), not late_refund.
				eventually(t, "expired and closed", func() (bool, string) {
					st, _ := s.pgStatus(t, id)
					d, err := s.temporal.DescribeWorkflowExecution(t.Context(), shop.WorkflowID(id), "")
					if err != nil {
						return false, err.Error()
					}
					running := d.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
					return st == "expired" && !running, st + ", saga " + d.WorkflowExecutionInfo.Status.String()
				})
				pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
				body := stripeEvent("evt_1_"+id, "payment_intent.succeeded", id, pi, unitPrice)
				c1, st1 := s.sendStripe(t, s.api, body)
				c2, st2 := s.sendStripe(t, s.api, body)
				// Another event id for the same payment (Stripe's charge and intent events,
				// say) must not refund it a second time either.
				c3, st3 := s.sendStripe(t, s.api, stripeEvent("evt_2_"+id, "payment_intent.succeeded", id, pi, unitPrice))
				if st1 != shop.DispositionLate || st2 != "duplicate" || st3 != shop.DispositionLate {
					t.Errorf("answers %q, %q, %q; want late_refund, duplicate, late_refund", st1, st2, st3)
				}
				if v := s.waitRefund(t, pi); v.Status != workflows.RefundRefunded {
					t.Errorf("refund workflow ended %+v, want refunded", v)
				}
				return []int{c1, c2, c3}, []string{pi}
			},
			wantCodes: []int{200, 200, 200}, wantDispositions: []string{"late_refund", "late_refund"}, wantState: "expired",
			wantRefunds: 1,
			check: func(t *testing.T, s *payStack, id string) {
				if _, orders := s.pgStatus(t, id); orders != 0 {
					t.Errorf("expired checkout has %d orders", orders)
				}
				var refunded int
				if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM refunds WHERE checkout_id = $1 AND status = 'refunded'`, id).Scan(&refunded); err != nil || refunded != 1 {
					t.Errorf("refunds rows with status refunded: %d (%v), want 1", refunded, err)
				}
			},
		},
		{
			name: "wrong amount is flagged and refunded once, not confirmed",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				pi := s.fake.AddIntent(id, "succeeded", unitPrice-1000, "usd")
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, pi, unitPrice-1000)
				c1, _ := s.sendStripe(t, s.api, body)
				if v := s.waitRefund(t, pi); v.Status != workflows.RefundRefunded {
					t.Errorf("refund workflow ended %+v, want refunded", v)
				}
				c2, _ := s.sendStripe(t, s.api, body)
				return []int{c1, c2}, []string{pi}
			},
			wantCodes: []int{200, 200}, wantDispositions: []string{"signalled"}, wantState: "open", wantRefunds: 1,
			check: func(t *testing.T, s *payStack, id string) {
				v := s.view(t, id)
				if v.Status != shop.StatusAwaitingPayment || !v.NeedsAttention || len(v.Refunds) != 1 {
					t.Errorf("view %+v: want awaiting_payment, needs_attention, one refund", v)
				}
			},
		},
		{
			name:       "unknown checkout is an orphan and signals nothing",
			noCheckout: true,
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				code, status := s.sendStripe(t, s.api, stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice))
				if status != shop.DispositionOrphan {
					t.Errorf("answer status %q, want orphan", status)
				}
				return []int{code}, []string{"pi_" + id}
			},
			wantCodes: []int{200}, wantDispositions: []string{"orphan"}, wantState: "",
			check: func(t *testing.T, s *payStack, id string) {
				_, err := s.temporal.DescribeWorkflowExecution(t.Context(), shop.WorkflowID(id), "")
				var nf *serviceerror.NotFound
				if !errors.As(err, &nf) {
					t.Errorf("describe saga of an unknown checkout: %v, want not found", err)
				}
			},
		},
		{
			name: "temporal unreachable: 503 and recorded, then delivered once on redelivery",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice)
				s.proxy.Cut()
				c1, _ := s.sendStripe(t, s.cutAPI, body)
				if rows := s.events(t, id); len(rows) != 1 || rows[0].Delivered || rows[0].Disposition != "pending" {
					t.Errorf("after the 503: rows %+v, want one recorded, not delivered", rows)
				}
				if n := s.paymentSignals(t, id); n != 0 {
					t.Errorf("after the 503: %d payment signals, want 0", n)
				}
				s.proxy.Restore()
				// The provider retries until it gets a 2xx; the client reconnects with backoff.
				codes := []int{c1}
				eventually(t, "redelivery answered 200", func() (bool, string) {
					code, status := s.sendStripe(t, s.cutAPI, body)
					if code != http.StatusOK && code != http.StatusServiceUnavailable {
						t.Errorf("redelivery answered %d %s", code, status)
					}
					if code == http.StatusOK && status != shop.DispositionSignalled {
						t.Errorf("redelivery answered %s, want signalled", status)
					}
					return code == http.StatusOK, strconv.Itoa(code)
				})
				t.Logf("redelivered after the proxy came back")
				c3, status := s.sendStripe(t, s.cutAPI, body)
				if status != "duplicate" {
					t.Errorf("third delivery answered %q, want duplicate", status)
				}
				return append(codes, http.StatusOK, c3), nil
			},
			wantCodes: []int{503, 200, 200}, wantDispositions: []string{"signalled"}, wantState: "confirmed",
			check: confirmedOnce,
		},
		{
			name: "standard webhooks: valid event confirms",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body, hdr := standardEvent(t, "msg_"+id, "payment.succeeded", id, "pay_"+id, unitPrice, standardSecretNew)
				code, out := s.post(t, s.api, "/v1/webhooks/standard/"+standardProvider, body, hdr)
				if out["status"] != shop.DispositionSignalled {
					t.Errorf("answer %v, want status signalled", out)
				}
				code2, out2 := s.post(t, s.api, "/v1/webhooks/standard/"+standardProvider, body, hdr)
				if out2["status"] != "duplicate" {
					t.Errorf("repeat answered %v, want duplicate", out2)
				}
				return []int{code, code2}, nil
			},
			wantCodes: []int{200, 200}, wantDispositions: []string{"signalled"}, wantState: "confirmed",
			check: func(t *testing.T, s *payStack, id string) {
				confirmedOnce(t, s, id)
				rows := s.events(t, id)
				var provider, ref string
				_ = s.pool.QueryRow(t.Context(), `SELECT payment_provider, payment_ref FROM orders WHERE checkout_id = $1`, id).Scan(&provider, &ref)
				if len(rows) != 1 || rows[0].Provider != standardProvider || rows[0].EventID != "msg_"+id || provider != standardProvider || ref != "pay_"+id {
					t.Errorf("rows %+v, order paid by %s %s; want one %s event msg_%s and the order paid by it", rows, provider, ref, standardProvider, id)
				}
			},
		},
		{
			name: "standard webhooks: bad signature is refused and records nothing",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body, hdr := standardEvent(t, "msg_"+id, "payment.succeeded", id, "pay_"+id, unitPrice,
					"whsec_"+base64.StdEncoding.EncodeToString([]byte("an-unknown-key-0123456789abcdef")))
				code, _ := s.post(t, s.api, "/v1/webhooks/standard/"+standardProvider, body, hdr)
				return []int{code}, nil
			},
			wantCodes: []int{400}, wantState: "open",
		},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			caseStart := time.Now()
			id := testenv.RandomID("wh-")
			if !tc.noCheckout {
				timeout := tc.paymentTimeout
				if timeout == 0 {
					timeout = 600
				}
				s.openCheckout(t, id, timeout)
			}
			codes, intents := tc.send(t, s, id)
			if !slices.Equal(codes, tc.wantCodes) {
				t.Errorf("HTTP statuses %v, want %v", codes, tc.wantCodes)
			}
			eventually(t, "final state", func() (bool, string) {
				st, _ := s.pgStatus(t, id)
				n := s.refundsOf(intents...)
				return st == tc.wantState && n == tc.wantRefunds, fmt.Sprintf("postgres status %q, %d refunds", st, n)
			})
			rows := s.events(t, id)
			var dispositions []string
			for _, r := range rows {
				dispositions = append(dispositions, r.Disposition)
				if !r.Delivered {
					t.Errorf("event %s recorded but not delivered", r.EventID)
				}
			}
			if !slices.Equal(dispositions, tc.wantDispositions) {
				t.Errorf("payment_events dispositions %v, want %v", dispositions, tc.wantDispositions)
			}
			if tc.check != nil {
				tc.check(t, s, id)
			}
			if n := s.refundsOf(intents...); n != tc.wantRefunds {
				t.Errorf("%d refunds at Stripe, want %d", n, tc.wantRefunds)
			}
			if tc.wantState == shop.RecordOpen {
				// Leave nothing awaiting payment for the reconciliation test below.
				if code, out := s.post(t, s.api, "/v1/checkouts/"+id+"/cancel", nil, buyer(id)); code != http.StatusOK {
					t.Errorf("cancel %s: %d %v", id, code, out)
				}
			}
			t.Logf("settled in %s", time.Since(caseStart).Round(time.Millisecond))
		})
	}

	// After the cases, which cancelled every checkout they left open: the reconciliation runs
	// must see only their own.
	reconciliationSubtests(t, s)
	longPollSubtests(t, s)
}
