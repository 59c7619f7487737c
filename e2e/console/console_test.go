// Package console tests the support console in a real browser: headless Chromium (driven
// with chromedp) against the Temporal Web UI of a dev server started from the pinned CLI,
// with the product (API and worker) running in the test binary. It checks that a support
// person can do what docs/support.md says: find a checkout by customer, SKU and state, and
// read its summary, current details, search attributes and the history's step summaries.
//
// Chromium comes from Debian's package (`apt-get install chromium`; .ci/run installs it when
// missing). Without it the test skips, except under CI=1, where it fails. UPDATE_SCREENSHOTS=1
// writes the screenshots into docs/support/ for the runbook; otherwise they go to a temporary
// folder (named in the log).
package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

const (
	// uiDeadline bounds every wait on the page: the UI is a single-page app that loads its
	// data after the page, on a machine other tests share.
	uiDeadline = 60 * time.Second
)

// TestSupportFindsAndReadsCheckoutsInTheWebUI puts a few checkouts of two customers and two SKUs in different states,
// then, in the browser: lists them with the runbook's kind of query and checks which rows
// show, and opens one to read what the runbook says support reads there.
func TestSupportFindsAndReadsCheckoutsInTheWebUI(t *testing.T) {
	browser := chromiumPath(t)
	p := startProduct(t)

	// Short random suffixes keep this run's ids apart from any other test on the same Redis
	// and keep the screenshots readable.
	run := testenv.RandomID("")[:6]
	phone, cover := "PHONE-X-"+run, "CASE-X-"+run
	p.stock(phone, 20)
	p.stock(cover, 20)
	u9, u7 := "u-9-"+run, "u-7-"+run

	waiting := p.checkout("c-123-"+run, u9, item(phone, 2), item(cover, 1)) // the one support looks for
	paid := p.checkout("c-124-"+run, u9, item(phone, 1))                    // paid: confirmed
	cancelled := p.checkout("c-125-"+run, u9, item(phone, 1))               // cancelled by the customer
	other := p.checkout("c-126-"+run, u7, item(phone, 1))                   // another customer, waiting
	p.pay(paid)
	p.cancel(cancelled)
	p.waitStatus(paid.CheckoutID, shop.StatusConfirmed)
	p.waitStatus(cancelled.CheckoutID, shop.StatusCancelled)

	// The list the UI shows is a visibility query: wait until the server's own answer is
	// the expected one (visibility lags a moment), so the browser checks the UI, not the lag.
	byState := fmt.Sprintf(`CustomerId = %q AND Skus IN (%q) AND CheckoutState = "awaiting_payment"`, u9, phone)
	byCustomer := fmt.Sprintf(`WorkflowType = "Checkout" AND CustomerId = %q`, u9)
	p.waitList(byState, waiting.WorkflowID)
	p.waitList(byCustomer, waiting.WorkflowID, paid.WorkflowID, cancelled.WorkflowID)

	b := newBrowser(t, browser)
	shots := screenshotDir(t)
	ui := p.uiURL + "/namespaces/default"

	t.Run("find by customer, SKU and state", func(t *testing.T) {
		b.open(t, ui+"/workflows?query="+url.QueryEscape(byState))
		b.waitText(t, waiting.WorkflowID)
		b.shot(t, shots, "list-by-state.png")
		b.absent(t, paid.WorkflowID, cancelled.WorkflowID, other.WorkflowID)

		// The same customer without the state: every checkout of theirs, none of the other's.
		// Seeing these rows here proves the list above left them out for their state.
		b.open(t, ui+"/workflows?query="+url.QueryEscape(byCustomer))
		b.waitText(t, waiting.WorkflowID, paid.WorkflowID, cancelled.WorkflowID)
		b.absent(t, other.WorkflowID)
	})

	expires := waiting.ExpiresAt.UTC().Format(time.RFC3339)
	waitingPage := ui + "/workflows/" + waiting.WorkflowID + "/" + p.runID(waiting.WorkflowID)
	paidPage := ui + "/workflows/" + paid.WorkflowID + "/" + p.runID(paid.WorkflowID)

	t.Run("read the summary and current details", func(t *testing.T) {
		b.open(t, waitingPage+"/user-metadata")
		b.waitText(t,
			"Checkout "+waiting.CheckoutID+": 2 x "+phone+", 1 x "+cover,                   // summary
			"Customer: "+u9+"; items: 2 x "+phone+", 1 x "+cover+"; payment window: 600 s", // details
			"Waiting for payment of "+money(waiting.AmountCents)+" until "+expires)         // current details
		b.shot(t, shots, "user-metadata.png")

		// A finished checkout keeps its last current details.
		b.open(t, paidPage+"/user-metadata")
		b.waitText(t, "Checkout "+paid.CheckoutID+": 1 x "+phone, "Confirmed as order "+*p.view(paid.CheckoutID).OrderID)
	})

	t.Run("read the search attributes", func(t *testing.T) {
		b.open(t, waitingPage+"/search-attributes")
		// The tab shows them as JSON: each name with its value.
		b.waitText(t, `"CheckoutState": "awaiting_payment"`, `"CustomerId": "`+u9+`"`,
			`"Skus": [`, `"`+phone+`"`, `"`+cover+`"`, fmt.Sprintf(`"AmountCents": %d`, waiting.AmountCents),
			`"HoldExpiresAt": "`+expires+`"`, `"NeedsAttention": false`)
		b.shot(t, shots, "search-attributes.png")
	})

	t.Run("read the history's step summaries", func(t *testing.T) {
		// The event list shows each step's summary beside its type, local activities included.
		b.open(t, waitingPage+"/history")
		b.waitText(t, "Record checkout "+waiting.CheckoutID, "Hold 2 x "+phone, "Hold 1 x "+cover,
			"Payment window until "+expires)
		// The input is the cart as sent (the UI shows it as compact JSON): no price field that
		// reads 0 before pricing.
		b.waitText(t, `"sku":"`+phone+`","quantity":2`)
		b.absent(t, "unit_price_cents")
		b.shot(t, shots, "history-input.png")
		b.scrollTo(t, "Hold 2 x "+phone)
		b.shot(t, shots, "history.png")

		b.open(t, paidPage+"/history")
		b.waitText(t, "Confirm order in Postgres", "Commit 1 x "+phone, "Hold 1 x "+phone)
		b.scrollTo(t, "Commit 1 x "+phone)
		b.shot(t, shots, "history-confirmed.png")
	})

	t.Run("timeline labels", func(t *testing.T) {
		// What the pinned UI (2.58.1) draws on its Timeline tab, as the runbook describes it:
		// a regular activity as its type and summary, a timer as its summary, a local
		// activity as its type only (the UI reads the type from the marker and ignores its
		// summary), an update as its name.
		cancelledPage := ui + "/workflows/" + cancelled.WorkflowID + "/" + p.runID(cancelled.WorkflowID)
		b.open(t, cancelledPage+"/timeline")
		b.waitTimeline(t, "reservation", "RecordCheckout", "ReserveStock", "cancel",
			"Payment window until "+cancelled.ExpiresAt.UTC().Format(time.RFC3339),
			"RecordOutcome • Record outcome cancelled", "ReleaseStock • Release 1 x "+phone+" (cancelled)")
		b.scrollTo(t, "ReleaseStock • Release")
		b.shot(t, shots, "timeline-cancelled.png")
	})
}

// chromiumPath finds Debian's Chromium (or CHROMIUM), skipping the test without it, except
// under CI=1, where a missing browser is a broken CI machine.
func chromiumPath(t *testing.T) string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err == nil {
		return p
	}
	msg := "chromium is not installed: apt-get install -y --no-install-recommends chromium (or set CHROMIUM)"
	if os.Getenv("CI") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// screenshotDir is docs/support with UPDATE_SCREENSHOTS=1, a temporary folder otherwise.
func screenshotDir(t *testing.T) string {
	if os.Getenv("UPDATE_SCREENSHOTS") == "1" {
		dir := filepath.Join("..", "..", "docs", "support")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("make %s: %v", dir, err)
		}
		return dir
	}
	dir := t.TempDir()
	t.Logf("screenshots go to %s (UPDATE_SCREENSHOTS=1 writes them into docs/support)", dir)
	return dir
}

// browser is one headless Chromium tab.
type browser struct {
	ctx context.Context
}

func newBrowser(t *testing.T, execPath string) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath),
		chromedp.WindowSize(1680, 900),
		chromedp.NoSandbox, // the test machines run as root
		chromedp.DisableGPU,
		// The machine has no internet: without these Chromium keeps dialing Google's hosts.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// The first run starts the browser, which lives as long as ctx: no timeout on it.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1680, 900)); err != nil {
		t.Fatalf("start chromium at %s: %v", execPath, err)
	}
	return &browser{ctx: ctx}
}

func (b *browser) open(t *testing.T, u string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiDeadline)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(u)); err != nil {
		t.Fatalf("open %s: %v", u, err)
	}
}

// waitText waits until the page shows every one of want (the app renders after loading its
// data, piece by piece).
func (b *browser) waitText(t *testing.T, want ...string) {
	t.Helper()
	raw, _ := json.Marshal(want)
	js := fmt.Sprintf(`%s.every(w => %s.includes(w))`, raw, pageTextJS)
	ctx, cancel := context.WithTimeout(b.ctx, uiDeadline+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](js,
		chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(uiDeadline)))
	if err != nil {
		text := b.text()
		var missing []string
		for _, w := range want {
			if !strings.Contains(text, w) {
				missing = append(missing, w)
			}
		}
		t.Fatalf("the page never showed %q (%v)\npage text:\n%s", missing, err, text)
	}
}

// absent fails for each of ids the page shows. Call it once the page has rendered its list.
func (b *browser) absent(t *testing.T, ids ...string) {
	t.Helper()
	text := b.text()
	for _, id := range ids {
		if strings.Contains(text, id) {
			t.Errorf("the page shows %s, which the query should leave out\npage text:\n%s", id, text)
		}
	}
}

// pageTextJS is the page's visible text with that of its frames: the UI renders a summary,
// details and current details as Markdown, each in a frame of its own (same origin).
const pageTextJS = `[document, ...Array.from(document.querySelectorAll("iframe"), f => f.contentDocument)]
	.map(d => d && d.body ? d.body.innerText : "").join("\n")`

// timelineJS lists the lines of the page's text: the Timeline tab draws each step's label
// as a line of its own.
const timelineJS = `(` + pageTextJS + `).split("\n").map(l => l.trim())`

// waitTimeline waits until the timeline shows every label of want, each as a whole label.
func (b *browser) waitTimeline(t *testing.T, want ...string) {
	t.Helper()
	raw, _ := json.Marshal(want)
	js := fmt.Sprintf(`((labels) => %s.every(w => labels.includes(w)))(%s)`, raw, timelineJS)
	ctx, cancel := context.WithTimeout(b.ctx, uiDeadline+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](js,
		chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(uiDeadline)))
	if err != nil {
		labels, _ := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](timelineJS))
		t.Fatalf("the timeline never showed all of %q (%v); the page's lines are %q", want, err, labels)
	}
}

// text is the page's visible text, for assertions and failure messages.
func (b *browser) text() string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](pageTextJS))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return s
}

// scrollTo scrolls an element showing text to the middle of the window, for a screenshot
// of it.
func (b *browser) scrollTo(t *testing.T, text string) {
	t.Helper()
	raw, _ := json.Marshal(text)
	// The deepest element whose rendered text holds it: the last such in document order.
	// Summaries are rendered in frames of their own: then the frame is scrolled to.
	js := fmt.Sprintf(`(() => {
		const want = %s;
		const deepest = d => Array.from(d.body ? d.body.querySelectorAll("*") : []).filter(e => (e.innerText || "").includes(want)).pop();
		let el = deepest(document);
		for (const f of document.querySelectorAll("iframe")) {
			if (!el && f.contentDocument && deepest(f.contentDocument)) el = f;
		}
		if (!el) return false;
		el.scrollIntoView({block: "center"});
		// Only the vertical scroll: a long summary would pull the table sideways.
		for (const e of document.querySelectorAll("*")) if (e.scrollLeft) e.scrollLeft = 0;
		window.scrollTo(0, window.scrollY);
		return true;
	})()`, raw)
	ctx, cancel := context.WithTimeout(b.ctx, uiDeadline)
	defer cancel()
	if found, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err != nil || !found {
		t.Fatalf("scroll to %q: found %v, err %v", text, found, err)
	}
}

// shot saves the visible page (1680x900: wide enough for the event list's summaries) as dir/name.
func (b *browser) shot(t *testing.T, dir, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, uiDeadline)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatalf("save screenshot: %v", err)
	}
}

// product is the API and worker in this test binary, on real Redis and Postgres, against a
// dev server that serves the Web UI.
type product struct {
	t     *testing.T
	tc    client.Client
	api   *checkouttest.Client
	uiURL string
}

func startProduct(t *testing.T) *product {
	p := checkouttest.Start(t, checkouttest.Options{UI: true, NoAPI: true})
	url := p.ServeAPI(api.Config{TemporalUIURL: p.UIURL}, p.Temporal, false)
	return &product{t: t, tc: p.Temporal, api: checkouttest.NewClient(url), uiURL: p.UIURL}
}

// call sends a JSON request to the API and decodes a 2xx answer into out.
func (p *product) call(method, path string, body any, header map[string]string, out any) int {
	p.t.Helper()
	a, err := p.api.Do(p.t.Context(), method, path, body, header, out)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	if a.Code >= 300 {
		p.t.Logf("%s %s: %d %s", method, path, a.Code, a.Body)
	}
	return a.Code
}

func (p *product) stock(sku string, onHand int64) {
	p.t.Helper()
	body := map[string]any{"on_hand": onHand, "price_cents": 99_900, "currency": "usd", "max_per_order": 2}
	if code := p.call(http.MethodPut, "/v1/inventory/"+sku, body, checkouttest.Admin(checkouttest.AdminToken), nil); code != http.StatusOK {
		p.t.Fatalf("stock %s: %d", sku, code)
	}
}

func item(sku string, qty int64) api.RequestItem { return api.RequestItem{SKU: sku, Quantity: qty} }

// checkout checks a cart out and expects every unit held (201).
func (p *product) checkout(cartID, customer string, items ...api.RequestItem) api.CheckoutView {
	p.t.Helper()
	var v api.CheckoutView
	if code := p.call(http.MethodPost, "/v1/checkouts", api.CheckoutRequest{CartID: cartID, CustomerID: customer, Items: items}, nil, &v); code != http.StatusCreated {
		p.t.Fatalf("check out %s: %d, want 201", cartID, code)
	}
	return v
}

// pay sends a correctly signed payment_intent.succeeded of the checkout's amount.
func (p *product) pay(v api.CheckoutView) {
	p.t.Helper()
	if err := p.api.Pay(p.t.Context(), v.CheckoutID, v.AmountCents, checkouttest.WebhookSecret); err != nil {
		p.t.Fatal(err)
	}
}

func (p *product) cancel(v api.CheckoutView) {
	p.t.Helper()
	if code := p.call(http.MethodPost, "/v1/checkouts/"+v.CheckoutID+"/cancel", nil, checkouttest.Buyer(v.CheckoutSecret), nil); code != http.StatusOK {
		p.t.Fatalf("cancel %s: %d", v.CheckoutID, code)
	}
}

func (p *product) view(checkoutID string) api.CheckoutView {
	p.t.Helper()
	var v api.CheckoutView
	if code := p.call(http.MethodGet, "/v1/checkouts/"+checkoutID, nil, checkouttest.BuyerOf(checkoutID), &v); code != http.StatusOK {
		p.t.Fatalf("get %s: %d", checkoutID, code)
	}
	return v
}

// waitStatus polls the checkout until it has status s.
func (p *product) waitStatus(checkoutID string, s shop.Status) {
	p.t.Helper()
	require.Eventually(p.t, func() bool { return p.view(checkoutID).Status == s }, uiDeadline, 100*time.Millisecond,
		"checkout %s never %s", checkoutID, s)
}

// waitList polls a visibility query until it returns exactly the workflows want.
func (p *product) waitList(query string, want ...string) {
	p.t.Helper()
	slices.Sort(want)
	require.EventuallyWithT(p.t, func(c *assert.CollectT) {
		var got []string
		resp, err := p.tc.ListWorkflow(p.t.Context(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default", Query: query})
		require.NoError(c, err)
		for _, ex := range resp.GetExecutions() {
			got = append(got, ex.GetExecution().GetWorkflowId())
		}
		slices.Sort(got)
		assert.Equal(c, want, got, "query %s", query)
	}, uiDeadline, 100*time.Millisecond)
}

// runID is the id of the workflow's latest run, for the UI's page of it.
func (p *product) runID(workflowID string) string {
	p.t.Helper()
	d, err := p.tc.DescribeWorkflow(context.Background(), workflowID, "")
	if err != nil {
		p.t.Fatalf("describe %s: %v", workflowID, err)
	}
	return d.WorkflowExecution.RunID
}

// money reads cents as the saga's current details do: 1998.00 USD.
func money(cents int64) string { return fmt.Sprintf("%d.%02d USD", cents/100, cents%100) }
