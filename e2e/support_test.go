package e2e

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// The runbook's List Filter queries are read from docs/support.md, between
// `<!-- query:NAME -->` markers, so the page support staff copy from is the text these tests
// run: a query edited there is tested as edited. The tests swap only the runbook's example
// values (PHONE-X, u-9, the example times) for this run's, and fail if an example value is
// missing from a query, so the page cannot drift from what is tested.
var queryMarker = regexp.MustCompile("(?s)<!-- query:([a-z-]+) -->\\s*```[a-z]*\\n(.*?)\\n```")

func runbookQueries(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "support.md"))
	if err != nil {
		t.Fatalf("read the runbook: %v", err)
	}
	queries := map[string]string{}
	for _, m := range queryMarker.FindAllStringSubmatch(string(raw), -1) {
		if _, dup := queries[m[1]]; dup {
			t.Fatalf("docs/support.md names query %q twice", m[1])
		}
		queries[m[1]] = strings.TrimSpace(m[2])
	}
	return queries
}

// fill returns the runbook query name with each example value (old, new pairs) replaced.
func fill(t *testing.T, queries map[string]string, name string, pairs ...string) string {
	t.Helper()
	q, ok := queries[name]
	if !ok {
		t.Fatalf("docs/support.md has no query %q", name)
	}
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(q, pairs[i]) {
			t.Fatalf("runbook query %q no longer contains the example value %s: %s", name, pairs[i], q)
		}
		q = strings.ReplaceAll(q, pairs[i], pairs[i+1])
	}
	return q
}

// supportEnv is the product in-process with the Temporal client and, optionally, the Web UI.
type supportEnv struct {
	*checkouttest.Product
	t        *testing.T
	api      *checkouttest.Client // the API without the sold-out gate
	tc       client.Client
	frontend string // host:port of the dev server
	ui       string // base URL of the Web UI, empty when headless
}

func newSupportEnv(t *testing.T, withUI bool) *supportEnv {
	// No payment provider: a refund cannot be made and gets stuck, which is exactly the
	// "refund needs attention" case the runbook's queries must find.
	p := checkouttest.Start(t, checkouttest.Options{UI: withUI, NoAPI: true,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	// No sold-out gate: a short cart then starts a saga that ends out_of_stock, the only way
	// support meets that state in the UI (the gate refuses most without a saga).
	url := p.ServeAPI(api.Config{TemporalUIURL: p.UIURL}, p.Temporal, false)
	return &supportEnv{Product: p, t: t, api: checkouttest.NewClient(url), tc: p.Temporal, frontend: p.DevServer.FrontendHostPort(), ui: p.UIURL}
}

// answer is an API response: the view on 2xx, the problem's code otherwise.
type answer struct {
	status int
	view   api.CheckoutView
	code   string
	detail string
	raw    string
}

func (e *supportEnv) call(method, path, token string, body any) answer {
	e.t.Helper()
	var header map[string]string
	if token != "" {
		header = checkouttest.Admin(token)
	}
	return e.callWith(method, path, header, body)
}

// callWith is call with any headers (a buyer's Checkout-Secret).
func (e *supportEnv) callWith(method, path string, header map[string]string, body any) answer {
	e.t.Helper()
	r, err := e.api.Do(e.t.Context(), method, path, body, header, nil)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	a := answer{status: r.Code, raw: string(r.Body)}
	if r.Code < 300 {
		if err := json.Unmarshal(r.Body, &a.view); err != nil {
			e.t.Fatalf("%s %s: decode %q: %v", method, path, r.Body, err)
		}
	} else {
		var p api.Problem
		_ = json.Unmarshal(r.Body, &p)
		a.code, a.detail = p.Code, p.Detail
	}
	return a
}

// stock puts onHand units of a SKU on sale at 1,999 cents, at most 2 per order.
func (e *supportEnv) stock(sku string, onHand int64) {
	e.t.Helper()
	if err := e.SetStock(e.t.Context(), sku, onHand, 2); err != nil {
		e.t.Fatal(err)
	}
}

// pay delivers a correctly signed payment_intent.succeeded for the checkout.
func (e *supportEnv) pay(checkoutID string, amount int64) error {
	return e.api.Pay(e.t.Context(), checkoutID, amount, checkouttest.WebhookSecret)
}

// start checks a cart out and expects it held (201).
func (e *supportEnv) start(cartID, customer string, timeout int64, items ...api.RequestItem) api.CheckoutView {
	e.t.Helper()
	a := e.call(http.MethodPost, "/v1/checkouts", "", api.CheckoutRequest{CartID: cartID, CustomerID: customer, Items: items, PaymentTimeoutSeconds: &timeout})
	if a.status != http.StatusCreated || a.view.Status != shop.StatusAwaitingPayment {
		e.t.Fatalf("start checkout %s: %d %s", cartID, a.status, a.raw)
	}
	return a.view
}

// waitView polls GET /v1/checkouts/{id}, as support does (the admin token reads any
// checkout), until ok accepts the view.
func (e *supportEnv) waitView(checkoutID string, ok func(api.CheckoutView) bool) api.CheckoutView {
	e.t.Helper()
	var a answer
	require.Eventually(e.t, func() bool {
		a = e.call(http.MethodGet, "/v1/checkouts/"+checkoutID, checkouttest.AdminToken, nil)
		return a.status == http.StatusOK && ok(a.view)
	}, 30*time.Second, 100*time.Millisecond, "checkout %s never reached the expected view", checkoutID)
	return a.view
}

// waitClosed waits until the workflow is no longer running.
func (e *supportEnv) waitClosed(workflowID string) {
	e.t.Helper()
	require.EventuallyWithT(e.t, func(c *assert.CollectT) {
		d, err := e.tc.DescribeWorkflow(e.t.Context(), workflowID, "")
		require.NoError(c, err)
		assert.NotEqual(c, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.Status, "%s still running", workflowID)
	}, 30*time.Second, 100*time.Millisecond)
}

// list runs a visibility query and returns the sorted workflow ids.
func (e *supportEnv) list(query string) ([]string, error) {
	var ids []string
	var token []byte
	for {
		resp, err := e.tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: "default", Query: query, NextPageToken: token,
		})
		if err != nil {
			return nil, err
		}
		for _, ex := range resp.GetExecutions() {
			ids = append(ids, ex.GetExecution().GetWorkflowId())
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// expectSet polls a visibility query (eventually consistent) until it returns exactly want.
func (e *supportEnv) expectSet(name, query string, want ...string) {
	e.t.Helper()
	slices.Sort(want)
	if want == nil {
		want = []string{}
	}
	if assert.EventuallyWithT(e.t, func(c *assert.CollectT) {
		got, err := e.list(query)
		require.NoError(c, err)
		assert.ElementsMatch(c, want, got, "query %s: %s", name, query)
	}, 30*time.Second, 100*time.Millisecond) {
		e.t.Logf("query %s: %s -> %v", name, query, want)
	}
}

// summaries returns the user-metadata summaries of a workflow's history events, in order.
func (e *supportEnv) summaries(workflowID string) []string {
	e.t.Helper()
	var out []string
	it := e.tc.GetWorkflowHistory(context.Background(), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			e.t.Fatalf("read history of %s: %v", workflowID, err)
		}
		if p := ev.GetUserMetadata().GetSummary(); p != nil {
			var s string
			if err := converter.GetDefaultDataConverter().FromPayload(p, &s); err != nil {
				e.t.Fatalf("decode a summary of %s: %v", workflowID, err)
			}
			out = append(out, s)
		}
	}
	return out
}

// currentDetails is what the UI shows as the workflow's current details (a running workflow).
func (e *supportEnv) currentDetails(workflowID string) string {
	e.t.Helper()
	resp, err := e.tc.QueryWorkflow(context.Background(), workflowID, "", "__temporal_workflow_metadata")
	if err != nil {
		e.t.Fatalf("query metadata of %s: %v", workflowID, err)
	}
	var md sdkpb.WorkflowMetadata
	if err := resp.Get(&md); err != nil {
		e.t.Fatalf("decode metadata of %s: %v", workflowID, err)
	}
	return md.GetCurrentDetails()
}

// updateJSON sends the update name with a JSON argument as it is, as the Temporal CLI's
// `workflow update execute --input` does, and waits for its result.
func (e *supportEnv) updateJSON(workflowID, name, input string) error {
	h, err := e.tc.UpdateWorkflow(context.Background(), client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: name, Args: []any{json.RawMessage(input)},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return err
	}
	return h.Get(context.Background(), nil)
}

func item(sku string, qty int64) api.RequestItem { return api.RequestItem{SKU: sku, Quantity: qty} }

// TestRunbookQueriesFindExactlyTheirCheckouts puts checkouts in every state support meets, then runs every List
// Filter query of the runbook through the SDK client and asserts the exact sets of workflow
// ids. It also checks what the UI shows: the view's temporal_ui link answering on the dev
// server's Web UI, the summaries, details and current details recorded for it, and how a
// finished checkout is answered by the API.
func TestRunbookQueriesFindExactlyTheirCheckouts(t *testing.T) {
	t.Parallel()
	e := newSupportEnv(t, true)
	queries := runbookQueries(t)
	run := testenv.RandomID("")
	phone, cover, charger := "PHONE-"+run, "CASE-"+run, "CHARGER-"+run
	for _, sku := range []string{phone, cover, charger} {
		e.stock(sku, 20)
	}
	soldOut := "SOLD-" + run
	e.stock(soldOut, 0)
	u9, u7 := "u-9-"+run, "u-7-"+run
	// The server stamps StartTime with its own clock (this machine's); a second of margin
	// covers the truncation to seconds.
	since := time.Now().UTC().Add(-2 * time.Second).Truncate(time.Second)

	a := e.start("a-"+run, u9, 600, item(phone, 1))                 // waiting, 10 minutes
	b := e.start("b-"+run, u7, 120, item(phone, 2), item(cover, 1)) // waiting, expires in 2 minutes
	c := e.start("c-"+run, u7, 240, item(cover, 1))                 // waiting, expires in 4 minutes
	d := e.start("d-"+run, u9, 600, item(phone, 1))                 // paid -> confirmed
	ca := e.start("e-"+run, u9, 600, item(cover, 1))                // cancelled by the customer
	f := e.start("f-"+run, u7, 2, item(phone, 1))                   // left to expire
	g := e.start("g-"+run, u9, 600, item(charger, 1))               // paid the wrong amount

	if err := e.pay(d.CheckoutID, d.AmountCents); err != nil {
		t.Fatalf("pay %s: %v", d.CheckoutID, err)
	}
	if got := e.callWith(http.MethodPost, "/v1/checkouts/"+ca.CheckoutID+"/cancel", checkouttest.Buyer(ca.CheckoutSecret), nil); got.status != http.StatusOK {
		t.Fatalf("cancel %s: %d %s", ca.CheckoutID, got.status, got.raw)
	}
	if err := e.pay(g.CheckoutID, g.AmountCents+100); err != nil {
		t.Fatalf("pay %s the wrong amount: %v", g.CheckoutID, err)
	}
	refundG := workflows.RefundWorkflowID("stripe", "pi_"+g.CheckoutID)
	short := e.call(http.MethodPost, "/v1/checkouts", "", api.CheckoutRequest{CartID: "h-" + run, CustomerID: u7, // out of stock
		Items: []api.RequestItem{item(cover, 1), item(soldOut, 1)}})
	if short.status != http.StatusConflict || short.code != "out_of_stock" {
		t.Fatalf("short cart: %d %s, want 409 out_of_stock", short.status, short.raw)
	}
	h := shop.WorkflowID("h-" + run)
	// Paused by support in the Web UI (the workflow's Pause).
	pz := e.start("p-"+run, "u-5-"+run, 600, item(charger, 1))
	if _, err := e.Temporal.WorkflowService().PauseWorkflowExecution(t.Context(), &workflowservice.PauseWorkflowExecutionRequest{
		Namespace: "default", WorkflowId: pz.WorkflowID, Identity: "support", Reason: "looking into it", RequestId: testenv.RandomID("pause-"),
	}); err != nil {
		t.Fatalf("pause %s: %v", pz.WorkflowID, err)
	}

	// Closed checkouts are answered by the API from the saga's result, with how they ended.
	dv := e.waitView(d.CheckoutID, func(v api.CheckoutView) bool { return v.Status.Final() })
	if dv.Status != shop.StatusConfirmed || dv.OrderID == nil || *dv.OrderID == "" {
		t.Errorf("paid checkout: %+v, want confirmed with an order id", dv)
	}
	ev := e.waitView(ca.CheckoutID, func(v api.CheckoutView) bool { return v.Status.Final() })
	if ev.Status != shop.StatusCancelled || ev.Reason == nil || *ev.Reason != "cancelled by customer" {
		t.Errorf("cancelled checkout: status %s reason %v, want cancelled by customer", ev.Status, ev.Reason)
	}
	fv := e.waitView(f.CheckoutID, func(v api.CheckoutView) bool { return v.Status.Final() })
	if fv.Status != shop.StatusExpired || fv.Reason == nil || !strings.HasPrefix(*fv.Reason, "no payment before ") {
		t.Errorf("expired checkout: status %s reason %v, want expired with no payment before ...", fv.Status, fv.Reason)
	}
	gv := e.waitView(g.CheckoutID, func(v api.CheckoutView) bool { return v.NeedsAttention })
	if gv.Status != shop.StatusAwaitingPayment || gv.Reason == nil || !strings.Contains(*gv.Reason, "does not match") ||
		!slices.Equal(gv.Refunds, []string{refundG}) {
		t.Errorf("wrong-amount checkout: %+v, want awaiting_payment, flagged, a mismatch reason and refund %s", gv, refundG)
	}
	for _, v := range []api.CheckoutView{dv, ev, fv} {
		e.waitClosed(v.WorkflowID) // the closed-checkout path of the GET, not the query
		again := e.call(http.MethodGet, "/v1/checkouts/"+v.CheckoutID, checkouttest.AdminToken, nil)
		if again.status != http.StatusOK || again.view.Status != v.Status || !sameString(again.view.Reason, v.Reason) {
			t.Errorf("closed checkout %s: GET %d %s, want status %s reason %v", v.CheckoutID, again.status, again.raw, v.Status, v.Reason)
		}
	}

	id := func(v api.CheckoutView) string { return v.WorkflowID }
	e.expectSet("holding-sku", fill(t, queries, "holding-sku", `"PHONE-X"`, `"`+phone+`"`), id(a), id(b))
	e.expectSet("customer-today", fill(t, queries, "customer-today",
		`"u-9"`, `"`+u9+`"`, `"2026-11-29T00:00:00Z"`, `"`+since.Format(time.RFC3339)+`"`),
		id(a), id(d), id(ca), id(g))
	e.expectSet("customer-today (u-7)", fill(t, queries, "customer-today",
		`"u-9"`, `"`+u7+`"`, `"2026-11-29T00:00:00Z"`, `"`+since.Format(time.RFC3339)+`"`),
		id(b), id(c), id(f), h)
	e.expectSet("customer-refunds", fill(t, queries, "customer-refunds", `"u-9"`, `"`+u9+`"`), refundG)
	soon := time.Now().UTC().Add(5 * time.Minute).Format(time.RFC3339)
	e.expectSet("expiring-soon", fill(t, queries, "expiring-soon", `"2026-11-29T10:20:00Z"`, `"`+soon+`"`), id(b), id(c))
	e.expectSet("needs-attention", fill(t, queries, "needs-attention"), id(g), refundG)
	e.expectSet("checkouts-needing-attention", fill(t, queries, "checkouts-needing-attention"), id(g))
	e.expectSet("refunds-stuck", fill(t, queries, "refunds-stuck"), refundG)
	e.expectSet("paused", fill(t, queries, "paused"), id(pz))
	ended := map[shop.Status][]string{
		shop.StatusExpired: {id(f)}, shop.StatusConfirmed: {id(d)}, shop.StatusCancelled: {id(ca)},
		shop.StatusOutOfStock: {h}, shop.StatusPaymentFailed: nil, shop.StatusFailed: nil,
	}
	for status, want := range ended {
		e.expectSet("ended-as "+string(status), fill(t, queries, "ended-as",
			`"expired"`, `"`+string(status)+`"`, `"2026-11-29T00:00:00Z"`, `"`+since.Format(time.RFC3339)+`"`), want...)
	}
	for name := range queries {
		switch name {
		case "holding-sku", "customer-today", "customer-refunds", "expiring-soon", "needs-attention",
			"checkouts-needing-attention", "refunds-stuck", "ended-as", "paused":
		default:
			t.Errorf("docs/support.md has query %q that no test runs", name)
		}
	}

	// A stuck refund answers support's retry (and, with still no provider, stays stuck).
	ref := e.call(http.MethodPost, "/v1/admin/refunds/stripe/pi_"+g.CheckoutID+"/retry", checkouttest.AdminToken, nil)
	if ref.status != http.StatusOK || !strings.Contains(ref.raw, `"status":"stuck"`) {
		t.Errorf("retry stuck refund: %d %s, want 200 with the stuck refund", ref.status, ref.raw)
	}
	if got := e.call(http.MethodPost, "/v1/admin/refunds/stripe/pi_nope-"+run+"/retry", checkouttest.AdminToken, nil); got.status != http.StatusConflict || got.code != "not_open" {
		t.Errorf("retry unknown refund: %d %s, want 409 not_open", got.status, got.raw)
	}

	t.Run("readable in the UI", func(t *testing.T) {
		desc, err := e.tc.DescribeWorkflow(context.Background(), a.WorkflowID, "")
		if err != nil {
			t.Fatal(err)
		}
		summary, _ := desc.GetStaticSummary()
		details, _ := desc.GetStaticDetails()
		if want := "Checkout " + a.CheckoutID + ": 1 x " + phone; summary != want {
			t.Errorf("static summary %q, want %q", summary, want)
		}
		if want := "Customer: " + u9 + "; items: 1 x " + phone + "; payment window: 600 s"; details != want {
			t.Errorf("static details %q, want %q", details, want)
		}
		expires := a.ExpiresAt.UTC().Format(time.RFC3339)
		if got, want := e.currentDetails(a.WorkflowID), "Waiting for payment of 19.99 USD until "+expires; got != want {
			t.Errorf("current details %q, want %q", got, want)
		}
		if got := e.currentDetails(refundG); !strings.HasPrefix(got, "NEEDS ATTENTION: ") {
			t.Errorf("stuck refund's current details %q, want NEEDS ATTENTION: ...", got)
		}
		for wid, want := range map[string][]string{
			a.WorkflowID: {"Record checkout " + a.CheckoutID, "Hold 1 x " + phone, "Payment window until " + expires},
			d.WorkflowID: {"Confirm order in Postgres", "Commit 1 x " + phone},
			f.WorkflowID: {"Release 1 x " + phone + " (expired)", "Record outcome expired"},
		} {
			got := e.summaries(wid)
			for _, w := range want {
				if !slices.Contains(got, w) {
					t.Errorf("history of %s has summaries %q, missing %q", wid, got, w)
				}
			}
		}
		// What the CLI support staff may use shows (temporal workflow describe, show, query),
		// read through the same API calls it makes.
		described, err := e.tc.DescribeWorkflowExecution(context.Background(), a.WorkflowID, "")
		if err != nil {
			t.Fatalf("describe %s: %v", a.WorkflowID, err)
		}
		var static string
		if p := described.GetExecutionConfig().GetUserMetadata().GetSummary(); p != nil {
			_ = converter.GetDefaultDataConverter().FromPayload(p, &static)
		}
		if static != "Checkout "+a.CheckoutID+": 1 x "+phone {
			t.Errorf("describe %s: summary %q, want %q", a.WorkflowID, static, "Checkout "+a.CheckoutID+": 1 x "+phone)
		}
		if _, ok := described.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()["CheckoutState"]; !ok {
			t.Errorf("describe %s: no CheckoutState search attribute in %v", a.WorkflowID, described.GetWorkflowExecutionInfo().GetSearchAttributes())
		}
		t.Logf("history of %s: %d summaries", d.WorkflowID, len(e.summaries(d.WorkflowID)))
		resp, err := e.tc.QueryWorkflow(context.Background(), a.WorkflowID, "", workflows.QueryStatus)
		var status struct {
			Status string `json:"status"`
		}
		if err == nil {
			err = resp.Get(&status)
		}
		if err != nil || status.Status != "awaiting_payment" {
			t.Errorf("query %s of %s: %v, status %q, want awaiting_payment", workflows.QueryStatus, a.WorkflowID, err, status.Status)
		}
	})

	t.Run("UI link answers", func(t *testing.T) {
		wantLink := e.ui + "/namespaces/default/workflows/" + a.WorkflowID
		if a.Links.TemporalUI != wantLink {
			t.Fatalf("links.temporal_ui %q, want %q", a.Links.TemporalUI, wantLink)
		}
		// The UI is a single-page app: the page itself is a 200 with the app's HTML.
		page := waitHTTP(t, a.Links.TemporalUI)
		if page.status != http.StatusOK || !strings.Contains(strings.ToLower(page.body), "<!doctype html") {
			t.Errorf("GET %s: %d, want 200 with the UI's page", a.Links.TemporalUI, page.status)
		}
		// The UI server proxies the API the page calls: it must find the workflow.
		apiURL := e.ui + "/api/v1/namespaces/default/workflows/" + a.WorkflowID
		got := waitHTTP(t, apiURL)
		var described struct {
			WorkflowExecutionInfo struct {
				Execution struct {
					WorkflowID string `json:"workflowId"`
				} `json:"execution"`
				Status string `json:"status"`
			} `json:"workflowExecutionInfo"`
		}
		_ = json.Unmarshal([]byte(got.body), &described)
		if got.status != http.StatusOK || described.WorkflowExecutionInfo.Execution.WorkflowID != a.WorkflowID ||
			described.WorkflowExecutionInfo.Status != "WORKFLOW_EXECUTION_STATUS_RUNNING" {
			t.Errorf("GET %s: %d %.300s, want 200 describing the running workflow", apiURL, got.status, got.body)
		}
		if nf := waitHTTP(t, e.ui+"/api/v1/namespaces/default/workflows/checkout-nope-"+run); nf.status != http.StatusNotFound {
			t.Errorf("the UI's API answers %d for an unknown workflow, want 404", nf.status)
		}
	})
}

type httpAnswer struct {
	status int
	body   string
}

// waitHTTP GETs url, retrying connection errors until the UI server is up.
func waitHTTP(t *testing.T, url string) httpAnswer {
	t.Helper()
	var got httpAnswer
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get(url)
		require.NoError(c, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		got = httpAnswer{resp.StatusCode, string(raw)}
	}, 30*time.Second, 100*time.Millisecond)
	return got
}

func sameString(a, b *string) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// TestSupportActionsWorkThroughTheAdminAPI drives each support update end to end through the API with the admin
// token: extend (and its validator's refusals), cancel by support (stock released), retry
// with nothing stuck, and every action on a finished or unknown checkout.
func TestSupportActionsWorkThroughTheAdminAPI(t *testing.T) {
	t.Parallel()
	e := newSupportEnv(t, false)
	run := testenv.RandomID("")
	phone := "PHONE-" + run
	e.stock(phone, 10)
	x := e.start("x-"+run, "u-1-"+run, 600, item(phone, 1))
	y := e.start("y-"+run, "u-2-"+run, 600, item(phone, 2))
	admin := func(action, checkoutID, token string, body any) answer {
		return e.call(http.MethodPost, "/v1/admin/checkouts/"+checkoutID+"/"+action, token, body)
	}

	// Authentication first: nothing changes without the token.
	for _, token := range []string{"", "wrong-token-0123456789"} {
		for _, action := range []string{"extend", "cancel", "retry"} {
			if got := admin(action, x.CheckoutID, token, map[string]int64{"seconds": 60}); got.status != http.StatusUnauthorized || got.code != "unauthorized" {
				t.Errorf("%s with token %q: %d %s, want 401 unauthorized", action, token, got.status, got.raw)
			}
		}
	}

	// extend: accepted, the deadline (view and search attribute) moves by exactly that much.
	ext := admin("extend", x.CheckoutID, checkouttest.AdminToken, map[string]int64{"seconds": 600})
	wantExpiry := x.ExpiresAt.Add(600 * time.Second)
	if ext.status != http.StatusOK || ext.view.ExpiresAt == nil || !ext.view.ExpiresAt.Equal(wantExpiry) {
		t.Fatalf("extend by 600 s: %d %s, want 200 with expires_at %s", ext.status, ext.raw, wantExpiry)
	}
	if got := e.call(http.MethodGet, "/v1/checkouts/"+x.CheckoutID, checkouttest.AdminToken, nil); got.view.ExpiresAt == nil || !got.view.ExpiresAt.Equal(wantExpiry) {
		t.Errorf("GET after extend: expires_at %v, want %s", got.view.ExpiresAt, wantExpiry)
	}
	desc, err := e.tc.DescribeWorkflow(context.Background(), x.WorkflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	if at, ok := desc.TypedSearchAttributes.GetTime(workflows.AttrHoldExpiresAt); !ok || !at.Equal(wantExpiry) {
		t.Errorf("HoldExpiresAt after extend: %v (%v), want %s", at, ok, wantExpiry)
	}

	// extend: refused by the API's and the saga's validation, nothing changed.
	for _, tc := range []struct {
		name string
		body any
		code int
		want string
	}{
		{"zero seconds", map[string]int64{"seconds": 0}, http.StatusUnprocessableEntity, "invalid_request"},
		{"over a day", map[string]int64{"seconds": 86_401}, http.StatusUnprocessableEntity, "invalid_request"},
		{"unknown field", map[string]any{"minutes": 5}, http.StatusBadRequest, "invalid_json"},
	} {
		if got := admin("extend", x.CheckoutID, checkouttest.AdminToken, tc.body); got.status != tc.code || got.code != tc.want {
			t.Errorf("extend %s: %d %s, want %d %s", tc.name, got.status, got.raw, tc.code, tc.want)
		}
	}
	// Past the cap: 600 + 600 + 86400 s stays within 48 h; another 86400 s would not.
	if got := admin("extend", x.CheckoutID, checkouttest.AdminToken, map[string]int64{"seconds": 86_400}); got.status != http.StatusOK {
		t.Fatalf("extend by a day: %d %s", got.status, got.raw)
	}
	wantExpiry = wantExpiry.Add(86_400 * time.Second)
	capped := admin("extend", x.CheckoutID, checkouttest.AdminToken, map[string]int64{"seconds": 86_400})
	if capped.status != http.StatusUnprocessableEntity || capped.code != "invalid_request" || !strings.Contains(capped.detail, "at most 48h0m0s") {
		t.Errorf("extend past the 48 h cap: %d %s, want 422 invalid_request naming the cap", capped.status, capped.raw)
	}
	if got := e.call(http.MethodGet, "/v1/checkouts/"+x.CheckoutID, checkouttest.AdminToken, nil); got.view.ExpiresAt == nil || !got.view.ExpiresAt.Equal(wantExpiry) {
		t.Errorf("a refused extend moved expires_at to %v, want %s", got.view.ExpiresAt, wantExpiry)
	}

	// The runbook's CLI form of the same update (`temporal workflow update execute --name
	// extend --input '{"seconds": 60}'`): the same JSON, sent with the SDK.
	if err := e.updateJSON(x.WorkflowID, workflows.UpdateExtend, `{"seconds": 60}`); err != nil {
		t.Errorf("update %s with {\"seconds\": 60}: %v", workflows.UpdateExtend, err)
	}
	wantExpiry = wantExpiry.Add(60 * time.Second)
	if got := e.call(http.MethodGet, "/v1/checkouts/"+x.CheckoutID, checkouttest.AdminToken, nil); got.view.ExpiresAt == nil || !got.view.ExpiresAt.Equal(wantExpiry) {
		t.Errorf("extend from the CLI: expires_at %v, want %s", got.view.ExpiresAt, wantExpiry)
	}

	// retry with nothing stuck.
	if got := admin("retry", x.CheckoutID, checkouttest.AdminToken, nil); got.status != http.StatusConflict || got.code != "nothing_to_retry" {
		t.Errorf("retry with nothing stuck: %d %s, want 409 nothing_to_retry", got.status, got.raw)
	}

	// cancel by support: cancelled, and the hold is back in stock.
	before, err := e.Inventory.Get(context.Background(), phone)
	if err != nil {
		t.Fatal(err)
	}
	cancelled := admin("cancel", y.CheckoutID, checkouttest.AdminToken, nil)
	if cancelled.status != http.StatusOK || cancelled.view.Status != shop.StatusCancelled ||
		cancelled.view.Reason == nil || *cancelled.view.Reason != "cancelled by support" {
		t.Fatalf("cancel by support: %d %s, want 200 cancelled by support", cancelled.status, cancelled.raw)
	}
	after, err := e.Inventory.Get(context.Background(), phone)
	if err != nil {
		t.Fatal(err)
	}
	if after.Held != before.Held-2 || after.Available != before.Available+2 || after.Available+after.Held != after.OnHand {
		t.Errorf("stock after support cancel: before %+v, after %+v; want 2 units back", before, after)
	}
	if held, err := e.Redis.HExists(context.Background(), lua.HoldsKey(phone), y.CheckoutID).Result(); err != nil || held {
		t.Errorf("cancelled checkout %s still holds %s (err %v)", y.CheckoutID, phone, err)
	}
	rec, err := e.Store.Checkout(context.Background(), y.CheckoutID)
	if err != nil || rec.Status != string(shop.StatusCancelled) || rec.Reason != "cancelled by support" {
		t.Errorf("postgres records the support cancel as %+v (err %v)", rec, err)
	}

	// A finished checkout: every action is refused as not open; so is an unknown one.
	e.waitClosed(y.WorkflowID)
	for _, action := range []string{"extend", "cancel", "retry"} {
		for _, id := range []string{y.CheckoutID, "nope-" + run} {
			var body any
			if action == "extend" {
				body = map[string]int64{"seconds": 60}
			}
			got := admin(action, id, checkouttest.AdminToken, body)
			if got.status != http.StatusConflict || got.code != "not_open" {
				t.Errorf("%s %s: %d %s, want 409 not_open", action, id, got.status, got.raw)
			}
		}
	}
	// The API still answers for it, from the saga's result.
	if got := e.call(http.MethodGet, "/v1/checkouts/"+y.CheckoutID, checkouttest.AdminToken, nil); got.status != http.StatusOK || got.view.Status != shop.StatusCancelled {
		t.Errorf("GET cancelled checkout: %d %s", got.status, got.raw)
	}
}
