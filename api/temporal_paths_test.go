package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	querypb "go.temporal.io/api/query/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// The API's Temporal paths against the SDK's client mock (go.temporal.io/sdk/mocks): each
// answer Temporal can give, and the HTTP answer the contract names for it. The catalog and
// the records are the real Postgres store; only Temporal is mocked, so these run in
// milliseconds. The same paths on a real Temporal server are e2e's.

// mockedTemporal is the harness with a mock Temporal client and a JSON log to read.
type mockedTemporal struct {
	*harness
	tc  *mocks.Client
	log *bytes.Buffer
}

func newMockedTemporal(t *testing.T) *mockedTemporal {
	tc := mocks.NewClient(t) // fails the test if an expected call was not made
	var log bytes.Buffer
	h := newHarness(t, func(_ *api.Config, d *api.Deps) {
		d.Temporal = tc
		d.Logger = slog.New(slog.NewJSONHandler(&log, nil))
	})
	return &mockedTemporal{harness: h, tc: tc, log: &log}
}

// post sends a one-line cart of a fresh SKU with 10 on hand.
func (m *mockedTemporal) post(t *testing.T, cart string) *httptest.ResponseRecorder {
	t.Helper()
	sku := m.stockSKU(t, "MOCK-", 10, 500, 5, "usd")
	return m.do(t, request{method: http.MethodPost, path: "/v1/checkouts",
		body: body(fmt.Sprintf(`{"cart_id":%q,"customer_id":"u-1","items":[{"sku":%q,"quantity":1}]}`, cart, sku))})
}

// updateWithStart makes update-with-start answer with the handle's result or err, and
// returns the saga input the API started with once it was sent.
func (m *mockedTemporal) updateWithStart(handle client.WorkflowUpdateHandle, err error) *workflows.Input {
	var in workflows.Input
	m.tc.On("NewWithStartWorkflowOperation", mock.Anything, mock.Anything, mock.Anything).
		Run(func(args mock.Arguments) { in = args.Get(2).(workflows.Input) }).Return(nil).Once()
	m.tc.On("UpdateWithStartWorkflow", mock.Anything, mock.Anything).Return(handle, err).Once()
	return &in
}

// queryAnswers makes the status query of cart answer view(): a running saga.
func (m *mockedTemporal) queryAnswers(t *testing.T, cart string, view func() shop.View) {
	result := mocks.NewEncodedValue(t)
	result.On("Get", mock.Anything).Run(func(args mock.Arguments) { *args.Get(0).(*shop.View) = view() }).Return(nil)
	m.tc.On("QueryWorkflowWithOptions", mock.Anything, mock.MatchedBy(func(r *client.QueryWorkflowWithOptionsRequest) bool {
		return r.WorkflowID == shop.WorkflowID(cart) && r.QueryType == workflows.QueryStatus &&
			r.QueryRejectCondition == enumspb.QUERY_REJECT_CONDITION_NOT_OPEN
	})).Return(&client.QueryWorkflowWithOptionsResponse{QueryResult: result}, nil).Once()
}

// finishedWith makes cart's saga closed with v as its result: the query is refused (NOT_OPEN)
// and the run's result answers.
func (m *mockedTemporal) finishedWith(t *testing.T, cart string, v shop.View) {
	run := mocks.NewWorkflowRun(t)
	run.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) { *args.Get(1).(*shop.View) = v }).Return(nil).Once()
	m.tc.On("GetWorkflow", mock.Anything, shop.WorkflowID(cart), "").Return(run).Once()
}

// finishedBy is finishedWith, the result naming the request that created the checkout
// (creator, read when the result is).
func (m *mockedTemporal) finishedBy(t *testing.T, cart string, status shop.Status, creator func() shop.Fingerprint) {
	run := mocks.NewWorkflowRun(t)
	run.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		v, f := viewOf(cart, status), creator()
		v.RequestHash, v.IdempotencyKey, v.Caller = f.RequestHash, f.IdempotencyKey, f.Caller
		*args.Get(1).(*shop.View) = v
	}).Return(nil).Once()
	m.tc.On("GetWorkflow", mock.Anything, shop.WorkflowID(cart), "").Return(run).Once()
}

func viewOf(cart string, status shop.Status) shop.View {
	return shop.View{CheckoutID: cart, WorkflowID: shop.WorkflowID(cart), Status: status, CustomerID: "u-1",
		Currency: "usd", AmountCents: 500, Items: []shop.Item{{SKU: "MOCK-1", Quantity: 1, UnitPriceCents: 500}}}
}

func checkoutView(t *testing.T, rec *httptest.ResponseRecorder, status int) api.CheckoutView {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status = %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	var v api.CheckoutView
	decodeJSON(t, rec, &v)
	return v
}

func TestStartAnswers201WithTheReservationOfTheSagaItStarted(t *testing.T) {
	m := newMockedTemporal(t)
	cart := testenv.RandomID("cart-")
	handle := mocks.NewWorkflowUpdateHandle(t)
	in := m.updateWithStart(handle, nil)
	handle.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		*args.Get(1).(*workflows.ReservationResult) = workflows.ReservationResult{View: viewOf(cart, shop.StatusAwaitingPayment),
			Created: true, RequestHash: in.RequestHash, IdempotencyKey: in.IdempotencyKey}
	}).Return(nil).Once()

	rec := m.post(t, cart)
	if v := checkoutView(t, rec, http.StatusCreated); v.Status != shop.StatusAwaitingPayment || v.CheckoutID != cart {
		t.Errorf("answer = %+v, want the saga's awaiting_payment view of %s", v, cart)
	}
	if loc := rec.Header().Get("Location"); loc != "/v1/checkouts/"+cart {
		t.Errorf("Location = %q, want /v1/checkouts/%s", loc, cart)
	}
	if in.CheckoutID != cart || in.IdempotencyKey != cart || in.RequestHash == "" || len(in.Items) != 1 {
		t.Errorf("saga started with %+v, want the cart, its id as the idempotency key and a request hash", *in)
	}
}

// A retried POST of a cart whose saga finished answers its end, after it is judged against
// the request that created the checkout (the saga's result names it): another request's POST
// of the cart id gets 409 and nothing of the checkout.
func TestStartOfACartWhoseSagaFinishedAnswersWithItsEnd(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"already started", serviceerror.NewWorkflowExecutionAlreadyStarted("started", "", "")},
		{"not found", serviceerror.NewNotFound("workflow not found")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newMockedTemporal(t)
			cart := testenv.RandomID("cart-")
			in := m.updateWithStart(nil, tt.err)
			m.finishedBy(t, cart, shop.StatusExpired, func() shop.Fingerprint {
				return shop.Fingerprint{RequestHash: in.RequestHash, IdempotencyKey: in.IdempotencyKey}
			})
			if v := checkoutView(t, m.post(t, cart), http.StatusOK); v.Status != shop.StatusExpired {
				t.Errorf("answer = %+v, want the finished saga's expired view", v)
			}
		})
		t.Run(tt.name+", another request", func(t *testing.T) {
			m := newMockedTemporal(t)
			cart := testenv.RandomID("cart-")
			m.updateWithStart(nil, tt.err)
			m.finishedBy(t, cart, shop.StatusConfirmed, func() shop.Fingerprint {
				return shop.Fingerprint{RequestHash: "the creator's body", IdempotencyKey: "the creator's key", Caller: "customer/u-1"}
			})
			rec := m.post(t, cart)
			problemOf(t, rec, http.StatusConflict, "checkout_exists")
			if strings.Contains(rec.Body.String(), "checkout_secret") || strings.Contains(rec.Body.String(), "confirmed") {
				t.Errorf("another request's POST was shown the checkout: %s", rec.Body)
			}
		})
	}
}

func TestStartPastTheUpdateLimitAnswersFromTheSagasView(t *testing.T) {
	limit := serviceerror.NewFailedPrecondition("workflow has reached the maximum number of updates")
	t.Run("still reserving: 429 for a minute", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := testenv.RandomID("cart-")
		m.updateWithStart(nil, limit)
		m.queryAnswers(t, cart, func() shop.View { return viewOf(cart, shop.StatusReserving) })
		rec := m.post(t, cart)
		problemOf(t, rec, http.StatusTooManyRequests, "too_many_updates")
		if got := rec.Header().Get("Retry-After"); got != "60" {
			t.Errorf("Retry-After = %q, want 60", got)
		}
	})
	t.Run("reserved: the retry needs no update", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := testenv.RandomID("cart-")
		in := m.updateWithStart(nil, limit)
		m.queryAnswers(t, cart, func() shop.View {
			v := viewOf(cart, shop.StatusAwaitingPayment)
			v.RequestHash, v.IdempotencyKey = in.RequestHash, in.IdempotencyKey // this request started it
			return v
		})
		if v := checkoutView(t, m.post(t, cart), http.StatusOK); v.Status != shop.StatusAwaitingPayment {
			t.Errorf("answer = %+v, want the saga's awaiting_payment view", v)
		}
	})
}

func TestStartMapsTemporalFailuresToRetryableAnswers(t *testing.T) {
	for _, tt := range []struct {
		name       string
		err        error
		status     int
		code       string
		retryAfter string
	}{
		{"unavailable", serviceerror.NewUnavailable("frontend down"), http.StatusServiceUnavailable, "service_unavailable", "1"},
		{"server deadline", serviceerror.NewDeadlineExceeded("deadline"), http.StatusServiceUnavailable, "service_unavailable", "1"},
		{"request deadline", fmt.Errorf("update-with-start: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, "service_unavailable", "1"},
		{"workflow not ready", serviceerror.NewWorkflowNotReady("retrying its task"), http.StatusServiceUnavailable, "service_unavailable", "1"},
		// A call that ended Canceled, as the SDK wraps it for an update's wait, and bare.
		{"server cancelled the call", client.NewWorkflowUpdateServiceTimeoutOrCanceledError(status.Error(codes.Canceled, "context canceled")),
			http.StatusServiceUnavailable, "service_unavailable", "1"},
		{"server cancelled the call, unwrapped", status.Error(codes.Canceled, "context canceled"),
			http.StatusServiceUnavailable, "service_unavailable", "1"},
		{"in-flight update limit", &serviceerror.ResourceExhausted{Cause: enumspb.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT, Message: "in flight"},
			http.StatusTooManyRequests, "too_many_requests", "1"},
		{"rate limit", &serviceerror.ResourceExhausted{Cause: enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT, Message: "rps"},
			http.StatusServiceUnavailable, "overloaded", "1"},
		{"anything else", temporal.NewApplicationError("odd", "Odd"), http.StatusInternalServerError, "internal_error", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newMockedTemporal(t)
			m.updateWithStart(nil, tt.err)
			rec := m.post(t, testenv.RandomID("cart-"))
			problemOf(t, rec, tt.status, tt.code)
			if got := rec.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
			}
		})
	}
}

func TestGetAnswersFromTheRunningSagaOrTheFinishedOnesResult(t *testing.T) {
	t.Run("running: the status query", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := testenv.RandomID("cart-")
		m.queryAnswers(t, cart, func() shop.View { return viewOf(cart, shop.StatusAwaitingPayment) })
		if v := checkoutView(t, m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: buyerOf(cart)}), http.StatusOK); v.Status != shop.StatusAwaitingPayment {
			t.Errorf("answer = %+v, want the running saga's view", v)
		}
		// The request log names the checkout and its saga.
		line := requestLine(t, m.log)
		if line["checkout_id"] != cart || line["workflow_id"] != shop.WorkflowID(cart) || line["status"] != 200.0 {
			t.Errorf("request line %v, want checkout_id %s, its workflow id and status 200", line, cart)
		}
	})
	t.Run("finished: the result", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := testenv.RandomID("cart-")
		m.tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).
			Return(&client.QueryWorkflowWithOptionsResponse{QueryRejected: &querypb.QueryRejected{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED}}, nil).Once()
		m.finishedWith(t, cart, viewOf(cart, shop.StatusConfirmed))
		if v := checkoutView(t, m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: buyerOf(cart)}), http.StatusOK); v.Status != shop.StatusConfirmed {
			t.Errorf("answer = %+v, want the finished saga's confirmed view", v)
		}
	})
	t.Run("gone from Temporal and never recorded: 404", func(t *testing.T) {
		m := newMockedTemporal(t)
		m.tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).Return(nil, serviceerror.NewNotFound("gone")).Once()
		problemOf(t, m.do(t, buyerGet(testenv.RandomID("cart-"), "")), http.StatusNotFound, "not_found")
	})
	t.Run("Temporal down: 503", func(t *testing.T) {
		m := newMockedTemporal(t)
		m.tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).Return(nil, serviceerror.NewUnavailable("down")).Once()
		problemOf(t, m.do(t, buyerGet(testenv.RandomID("cart-"), "")), http.StatusServiceUnavailable, "service_unavailable")
	})
}

// GET ?wait=N long-polls the saga's end (the run's result) instead of querying the saga: the
// mock fails the test on any query it was not told to expect.
func TestGetWithWaitAnswersTheEndWithoutAQuery(t *testing.T) {
	t.Run("ends within the wait: its result, no query", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := testenv.RandomID("cart-")
		m.finishedWith(t, cart, viewOf(cart, shop.StatusConfirmed))
		if v := checkoutView(t, m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart + "?wait=5", header: buyerOf(cart)}), http.StatusOK); v.Status != shop.StatusConfirmed {
			t.Errorf("answer = %+v, want the ended saga's confirmed view", v)
		}
	})
	t.Run("still running after the wait: the status query", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := testenv.RandomID("cart-")
		run := mocks.NewWorkflowRun(t)
		var waited time.Duration
		run.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
			ctx := args.Get(0).(context.Context)
			if d, ok := ctx.Deadline(); ok {
				waited = time.Until(d)
			}
			<-ctx.Done()
		}).Return(context.DeadlineExceeded).Once()
		m.tc.On("GetWorkflow", mock.Anything, shop.WorkflowID(cart), "").Return(run).Once()
		m.queryAnswers(t, cart, func() shop.View { return viewOf(cart, shop.StatusAwaitingPayment) })
		if v := checkoutView(t, m.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart + "?wait=1", header: buyerOf(cart)}), http.StatusOK); v.Status != shop.StatusAwaitingPayment {
			t.Errorf("answer = %+v, want the running saga's view", v)
		}
		if waited <= 0 || waited > time.Second {
			t.Errorf("the wait's deadline was %s away, want at most the 1 s asked for", waited)
		}
	})
	for _, bad := range []string{"-1", "11", "2.5", "1s", "x"} {
		t.Run("wait="+bad+" is refused", func(t *testing.T) {
			m := newMockedTemporal(t) // no Temporal call is expected
			p := problemOf(t, m.do(t, buyerGet(testenv.RandomID("cart-"), "?wait="+bad)),
				http.StatusUnprocessableEntity, "invalid_request")
			if len(p.Errors) != 1 || p.Errors[0].Field != "wait" {
				t.Errorf("problem %+v, want one error naming wait", p)
			}
		})
	}
}

func TestCancelIsTheSagasCancelUpdate(t *testing.T) {
	cancel := func(m *mockedTemporal, cart string, handle client.WorkflowUpdateHandle, err error) {
		m.tc.On("UpdateWorkflow", mock.Anything, mock.MatchedBy(func(o client.UpdateWorkflowOptions) bool {
			by, ok := o.Args[0].(workflows.CancelRequest)
			return o.WorkflowID == shop.WorkflowID(cart) && o.UpdateName == workflows.UpdateCancel && ok && by.By == "customer" &&
				o.WaitForStage == client.WorkflowUpdateStageCompleted
		})).Return(handle, err).Once()
	}
	post := func(t *testing.T, m *mockedTemporal, cart string) *httptest.ResponseRecorder {
		return m.do(t, request{method: http.MethodPost, path: "/v1/checkouts/" + cart + "/cancel", header: buyerOf(cart)})
	}
	t.Run("open: cancelled", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := testenv.RandomID("cart-")
		handle := mocks.NewWorkflowUpdateHandle(t)
		handle.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
			*args.Get(1).(*shop.View) = viewOf(cart, shop.StatusCancelled)
		}).Return(nil).Once()
		cancel(m, cart, handle, nil)
		if v := checkoutView(t, post(t, m, cart), http.StatusOK); v.Status != shop.StatusCancelled {
			t.Errorf("answer = %+v, want cancelled", v)
		}
	})
	t.Run("paid: 409", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := testenv.RandomID("cart-")
		handle := mocks.NewWorkflowUpdateHandle(t)
		handle.On("Get", mock.Anything, mock.Anything).
			Return(temporal.NewApplicationError("checkout is paid", shop.ErrTypeAlreadyPaid)).Once()
		cancel(m, cart, handle, nil)
		problemOf(t, post(t, m, cart), http.StatusConflict, "already_confirmed")
	})
	t.Run("finished: its end", func(t *testing.T) {
		m := newMockedTemporal(t)
		cart := testenv.RandomID("cart-")
		cancel(m, cart, nil, serviceerror.NewNotFound("workflow execution already completed"))
		m.finishedWith(t, cart, viewOf(cart, shop.StatusExpired))
		if v := checkoutView(t, post(t, m, cart), http.StatusOK); v.Status != shop.StatusExpired {
			t.Errorf("answer = %+v, want the finished saga's expired view", v)
		}
	})
}

// TestARequestThatOutlivesItsTimeoutLeavesItsConnectionUsable: a request whose Temporal call
// runs past the request timeout answers 503, and the client's next request on the same
// keep-alive connection is served normally. (A read deadline left on the connection while
// the server waits for the client's next byte cancels the connection's context, and with it
// every later request on that connection, each answered at once with "context canceled".)
// A request with a body gets the deadline while its body is read, and must not keep it.
func TestARequestThatOutlivesItsTimeoutLeavesItsConnectionUsable(t *testing.T) {
	for _, tt := range []struct {
		name, method, path string
		body               bool // a one-line cart of a stocked SKU
	}{
		{"cancel, no body", http.MethodPost, "/v1/checkouts/CART/cancel", false},
		{"get, no body", http.MethodGet, "/v1/checkouts/CART", false},
		{"start, with a body", http.MethodPost, "/v1/checkouts", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const timeout = 300 * time.Millisecond
			tc := mocks.NewClient(t)
			h := newHarness(t, func(cfg *api.Config, d *api.Deps) { d.Temporal = tc; cfg.RequestTimeout = timeout })
			cart := testenv.RandomID("cart-")
			// Every Temporal call waits for its context: the first one until the request
			// timeout, the later ones answer at once unless their context is already done.
			var calls atomic.Int32
			slow := func(ctx context.Context) error {
				if calls.Add(1) == 1 {
					<-ctx.Done()
				}
				return ctx.Err()
			}
			handle := mocks.NewWorkflowUpdateHandle(t)
			handle.On("Get", mock.Anything, mock.Anything).Return(func(ctx context.Context, v any) error {
				*v.(*shop.View) = viewOf(cart, shop.StatusCancelled)
				return nil
			}).Maybe()
			slowHandle := func(ctx context.Context, h client.WorkflowUpdateHandle) (client.WorkflowUpdateHandle, error) {
				if err := slow(ctx); err != nil {
					return nil, err
				}
				return h, nil
			}
			tc.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(
				func(ctx context.Context, _ client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
					return slowHandle(ctx, handle)
				}).Maybe()
			result := mocks.NewEncodedValue(t)
			result.On("Get", mock.Anything).Run(func(args mock.Arguments) { *args.Get(0).(*shop.View) = viewOf(cart, shop.StatusCancelled) }).Return(nil).Maybe()
			tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).Return(
				func(ctx context.Context, _ *client.QueryWorkflowWithOptionsRequest) (*client.QueryWorkflowWithOptionsResponse, error) {
					if err := slow(ctx); err != nil {
						return nil, err
					}
					return &client.QueryWorkflowWithOptionsResponse{QueryResult: result}, nil
				}).Maybe()

			// Update-with-start answers the reservation of the saga it was sent with.
			var in workflows.Input
			tc.On("NewWithStartWorkflowOperation", mock.Anything, mock.Anything, mock.Anything).
				Run(func(args mock.Arguments) { in = args.Get(2).(workflows.Input) }).Return(nil).Maybe()
			started := mocks.NewWorkflowUpdateHandle(t)
			started.On("Get", mock.Anything, mock.Anything).Return(func(ctx context.Context, v any) error {
				*v.(*workflows.ReservationResult) = workflows.ReservationResult{View: viewOf(cart, shop.StatusAwaitingPayment),
					RequestHash: in.RequestHash, IdempotencyKey: in.IdempotencyKey}
				return nil
			}).Maybe()
			tc.On("UpdateWithStartWorkflow", mock.Anything, mock.Anything).Return(
				func(ctx context.Context, _ client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
					return slowHandle(ctx, started)
				}).Maybe()
			var body string
			if tt.body {
				body = fmt.Sprintf(`{"cart_id":%q,"customer_id":"u-1","items":[{"sku":%q,"quantity":1}]}`, cart, h.stockSKU(t, "MOCK-", 10, 500, 5, "usd"))
			}

			base := "http://" + listen(t, h.e)
			hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}} // one keep-alive connection
			t.Cleanup(hc.CloseIdleConnections)
			send := func() (int, bool, string) {
				var reused bool
				ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
					GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
				})
				req, _ := http.NewRequestWithContext(ctx, tt.method, base+strings.ReplaceAll(tt.path, "CART", cart), strings.NewReader(body))
				if body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				req.Header.Set(api.CheckoutSecretHeader, api.CheckoutSecret(api.DevCheckoutSecretKey, cart))
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", tt.method, tt.path, err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, reused, string(b)
			}
			if code, _, b := send(); code != http.StatusServiceUnavailable {
				t.Fatalf("first request, past its timeout: %d %s; want 503", code, b)
			}
			time.Sleep(timeout) // the first request's read deadline, had it been left, is past
			for i := range 3 {
				code, reused, b := send()
				if !reused {
					t.Logf("request %d went on a new connection", i+2)
				}
				if code != http.StatusOK && code != http.StatusCreated {
					t.Errorf("request %d on the same connection (reused %v): %d %s; want 200 or 201", i+2, reused, code, b)
				}
			}
		})
	}
}
