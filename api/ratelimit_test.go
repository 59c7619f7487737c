package api_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// limitedHarness is a harness whose limits count in the test Redis, under keys of this test's
// own (a fresh address range and customer ids), so runs never share a budget.
func limitedHarness(t *testing.T, limits api.RateLimits) *harness {
	limits.Limiter = lua.NewRateLimiter(lua.NewCoalescedScripts(testenv.Redis(t))) // as cmd/checkout wires it
	return newHarness(t, func(_ *api.Config, d *api.Deps) { d.RateLimits = &limits })
}

// post sends a cart of an unknown SKU (answered 422 by the catalog, before any saga) from
// addr for customer, and returns the answer.
func (h *harness) postFrom(t *testing.T, addr, customer, cart string) *httptest.ResponseRecorder {
	t.Helper()
	return h.serveFrom(addr+":40000", unknownSKUCart(customer, cart, nil))
}

// answersTo sends n requests, send(0) to send(n-1), one after the other, and counts their
// answers by status.
func answersTo(n int, send func(i int) int) map[int]int {
	answers := map[int]int{}
	for i := range n {
		answers[send(i)]++
	}
	return answers
}

// unknownSKUCart is a POST of cart for customer, of one unit of an unknown SKU, with header.
func unknownSKUCart(customer, cart string, header map[string]string) request {
	return request{method: http.MethodPost, path: "/v1/checkouts", header: header,
		body: body(fmt.Sprintf(`{"cart_id":%q,"customer_id":%q,"items":[{"sku":"NOPE-%s","quantity":1}]}`, cart, customer, cart))}
}

// A script that invents 50 customers from one address gets the address's share of
// checkouts and no more: the rest are 429 with Retry-After, before the catalog, the gate or
// a saga cost anything. Another address keeps its own share.
func TestInventedCustomersFromOneAddressGetItsShareOnly(t *testing.T) {
	h := limitedHarness(t, api.RateLimits{CheckoutsPerAddress: shop.RateLimit{Rate: 5, Burst: 5, Period: time.Minute}})
	run := testenv.RandomID("")
	addr := "198.51.100." + strconv.Itoa(int(time.Now().UnixNano()%250)+1)
	passed, limited := 0, 0
	for i := range 50 {
		rec := h.postFrom(t, addr, fmt.Sprintf("bot-%s-%d", run, i), fmt.Sprintf("c-%s-%d", run, i))
		switch rec.Code {
		case http.StatusUnprocessableEntity:
			passed++
		case http.StatusTooManyRequests:
			limited++
			if ra, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || ra < 1 {
				t.Fatalf("429 without a Retry-After in seconds: %q", rec.Header().Get("Retry-After"))
			}
		default:
			t.Fatalf("cart %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if passed != 5 || limited != 45 {
		t.Errorf("50 invented customers from one address: %d reached the catalog, %d limited; want 5 and 45", passed, limited)
	}
	if rec := h.postFrom(t, "203.0.113.7", "u-"+run, "c-other-"+run); rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("another address: %d, want its own share", rec.Code)
	}
}

// A checkout counts against its address before its body is read, on the checkouts per
// address, or on the address's requests when that limit is off: a script past its share is
// refused for the price of one count, whatever it sends. Each address here sends bodies that
// are not JSON, answered 400 while its share lasts and 429 after.
func TestACheckoutPastItsAddressShareIsRefusedBeforeItsBodyIsRead(t *testing.T) {
	three := shop.RateLimit{Rate: 3, Burst: 3, Period: time.Minute}
	for _, tc := range []struct {
		name   string
		limits api.RateLimits
	}{
		{"checkouts per address", api.RateLimits{CheckoutsPerAddress: three}},
		{"requests per address, checkouts per address off", api.RateLimits{PerAddress: three}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := limitedHarness(t, tc.limits)
			// An address of its own, so no earlier run's count is left on it.
			addr := fmt.Sprintf("10.%d.%d.%d:40000", rand.N(256), rand.N(256), rand.N(254)+1)
			answers := map[int]int{}
			for range 8 {
				rec := h.serveFrom(addr, request{method: http.MethodPost, path: "/v1/checkouts", body: body(`{"cart_id": not json`)})
				answers[rec.Code]++
			}
			if answers[http.StatusBadRequest] != 3 || answers[http.StatusTooManyRequests] != 5 {
				t.Errorf("8 bad bodies from one address with 3 checkouts to spend: %v; want 3 x 400 and 5 x 429", answers)
			}
		})
	}
}

// One customer from many addresses is bounded by its id.
func TestOneCustomerFromManyAddressesGetsItsShareOnly(t *testing.T) {
	h := limitedHarness(t, api.RateLimits{PerCustomer: shop.RateLimit{Rate: 3, Burst: 3, Period: time.Minute}})
	run := testenv.RandomID("")
	answers := answersTo(20, func(i int) int {
		return h.postFrom(t, fmt.Sprintf("192.0.2.%d", i+1), "u-"+run, fmt.Sprintf("c-%s-%d", run, i)).Code
	})
	if passed := answers[http.StatusUnprocessableEntity]; passed != 3 {
		t.Errorf("one customer from 20 addresses: %d reached the catalog, want 3", passed)
	}
}

// A POST past the customer's share is refused before anything is written: it claims no
// Idempotency-Key (so its buyer may send the key again with another body), though it names
// stocked SKUs and a new cart, which the door would let through to the claim. (Counting the
// customer beside the door's reads would keep this, and was measured slower: see
// docs/performance.md.)
func TestACustomerPastItsShareClaimsNothing(t *testing.T) {
	h := limitedHarness(t, api.RateLimits{PerCustomer: shop.RateLimit{Rate: 1, Burst: 1, Period: time.Minute}})
	run := testenv.RandomID("")
	sku := h.stockSKU(t, "LIMITED", 10, 1_000, 5, "usd")
	customer := "u-" + run
	if got := h.postFrom(t, "192.0.2.1", customer, "c-"+run+"-0").Code; got != http.StatusUnprocessableEntity {
		t.Fatalf("the customer's first POST (an unknown SKU): %d, want 422 from the catalog", got)
	}
	key := "k-" + run
	second := request{method: http.MethodPost, path: "/v1/checkouts", header: map[string]string{"Idempotency-Key": key},
		body: body(fmt.Sprintf(`{"cart_id":"c-%s-1","customer_id":%q,"items":[{"sku":%q,"quantity":1}]}`, run, customer, sku))}
	rec := h.serveFrom("192.0.2.2:40000", second)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("the customer's second POST: %d (Retry-After %q), want 429 with Retry-After: %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	var claimed int
	if err := h.pool.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_keys WHERE key = $1`, key).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if claimed != 0 {
		t.Errorf("the refused POST claimed its Idempotency-Key (%d rows): a limit's refusal must write nothing", claimed)
	}
}

// X-Forwarded-For is anyone's to write: without trusted proxies it does not pick the address
// the limits count, so a script cannot buy a fresh budget per request.
func TestAForgedForwardedForBuysNoFreshBudget(t *testing.T) {
	h := limitedHarness(t, api.RateLimits{CheckoutsPerAddress: shop.RateLimit{Rate: 2, Burst: 2, Period: time.Minute}})
	run := testenv.RandomID("")
	peer := "198.18.0." + strconv.Itoa(int(time.Now().UnixNano()%250)+1) + ":1"
	answers := answersTo(10, func(i int) int {
		return h.serveFrom(peer, request{method: http.MethodPost, path: "/v1/checkouts",
			header: map[string]string{"X-Forwarded-For": fmt.Sprintf("10.9.%d.1", i)},
			body:   body(fmt.Sprintf(`{"cart_id":"c-%s-%d","customer_id":"u-%s-%d","items":[{"sku":"NOPE","quantity":1}]}`, run, i, run, i))}).Code
	})
	if limited := answers[http.StatusTooManyRequests]; limited != 8 {
		t.Errorf("10 checkouts with forged X-Forwarded-For from one peer: %d limited, want 8", limited)
	}
}

// Reads and cancels count against the caller's address too, before the checkout secret is
// checked or the saga asked: a script polling or probing cart ids gets its share, then 429.
func TestReadsAndCancelsCountAgainstTheAddress(t *testing.T) {
	h := limitedHarness(t, api.RateLimits{PerAddress: shop.RateLimit{Rate: 6, Burst: 6, Period: time.Minute}})
	run := testenv.RandomID("")
	addr := "198.51.100." + strconv.Itoa(int(time.Now().UnixNano()%250)+1) + ":40000"
	answers := map[int]int{}
	for i := range 12 {
		method, path := http.MethodGet, "/v1/checkouts/c-"+run+"?wait=10"
		if i%2 == 1 {
			method, path = http.MethodPost, "/v1/checkouts/c-"+run+"/cancel"
		}
		rec := h.serveFrom(addr, request{method: method, path: path})
		answers[rec.Code]++
		if rec.Code == http.StatusTooManyRequests && rec.Header().Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
	}
	if answers[http.StatusNotFound] != 6 || answers[http.StatusTooManyRequests] != 6 {
		t.Errorf("12 reads and cancels of another's cart from one address: %v; want 6 x 404 and 6 x 429", answers)
	}
}

// Behind a load balancer (TRUSTED_PROXIES), X-Forwarded-For names the client, and only the
// named proxies are believed: a buyer inside a private network (10.0.0.5 here) who writes
// a header of their own still counts as 10.0.0.5, not as the address they wrote. Echo's
// extractor trusts every private, loopback and link-local hop unless told otherwise.
func TestOnlyTheNamedProxiesAreBelievedInForwardedFor(t *testing.T) {
	_, lb, _ := net.ParseCIDR("127.0.0.1/32")
	limits := api.RateLimits{Limiter: lua.NewRateLimiter(testenv.Redis(t)),
		CheckoutsPerAddress: shop.RateLimit{Rate: 2, Burst: 2, Period: time.Minute}}
	h := newHarness(t, func(cfg *api.Config, d *api.Deps) {
		cfg.TrustedProxies = []*net.IPNet{lb}
		d.RateLimits = &limits
	})
	run := testenv.RandomID("")
	client := fmt.Sprintf("10.%d.%d.5", time.Now().UnixNano()%250+1, time.Now().UnixNano()/7%250+1)
	post := func(i int, xff string) int {
		return h.serveFrom("127.0.0.1:40000", request{method: http.MethodPost, path: "/v1/checkouts", // from the load balancer
			header: map[string]string{"X-Forwarded-For": xff},
			body:   body(fmt.Sprintf(`{"cart_id":"c-%s-%d","customer_id":"u-%s-%d","items":[{"sku":"NOPE","quantity":1}]}`, run, i, run, i))}).Code
	}
	answers := answersTo(10, func(i int) int { // the balancer appends the peer it saw to what the client wrote
		return post(i, fmt.Sprintf("203.0.113.%d, %s", i+1, client))
	})
	if limited := answers[http.StatusTooManyRequests]; limited != 8 {
		t.Errorf("10 checkouts from %s, each with a forged address before it: %d limited, want 8", client, limited)
	}
	// Distinct clients behind the balancer each have their own share.
	for i := range 5 {
		if code := post(100+i, fmt.Sprintf("198.18.%d.%d", time.Now().UnixNano()%250, i+1)); code == http.StatusTooManyRequests {
			t.Errorf("client %d behind the balancer was limited on its first checkout", i)
		}
	}
}

// An IPv6 client counts per prefix (a /64 unless Config.IPv6Prefix says otherwise): a
// script that sends each checkout from a new address of its /64 spends one budget, while
// another /64 has its own. An IPv4-mapped IPv6 address is its IPv4 address, and one address
// written two ways is one address.
func TestAnIPv6ClientCountsPerPrefix(t *testing.T) {
	h := limitedHarness(t, api.RateLimits{CheckoutsPerAddress: shop.RateLimit{Rate: 3, Burst: 3, Period: time.Minute}})
	run := testenv.RandomID("")
	net64 := fmt.Sprintf("2001:db8:%x:%x", rand.N(0xffff)+1, rand.N(0xffff)+1)
	answers := answersTo(8, func(i int) int { // ::1 .. ::8, each a new address of one /64
		return h.postFrom(t, fmt.Sprintf("[%s::%x]", net64, i+1), fmt.Sprintf("u-%s-%d", run, i), fmt.Sprintf("c-%s-%d", run, i)).Code
	})
	if answers[http.StatusUnprocessableEntity] != 3 || answers[http.StatusTooManyRequests] != 5 {
		t.Errorf("8 checkouts from 8 addresses of %s::/64 with 3 to spend: %v; want 3 x 422 and 5 x 429", net64, answers)
	}
	// The same /64 spelled out in full is the same client.
	long := strings.ReplaceAll(net64, "2001:db8:", "2001:0db8:") + ":0:0:0:9"
	if rec := h.postFrom(t, "["+long+"]", "u-long-"+run, "c-long-"+run); rec.Code != http.StatusTooManyRequests {
		t.Errorf("a spent /64 written in full (%s): %d, want 429", long, rec.Code)
	}
	other := fmt.Sprintf("[2001:db8:%x:%x::1]", rand.N(0xffff)+1, rand.N(0xffff)+1)
	if rec := h.postFrom(t, other, "u-other-"+run, "c-other-"+run); rec.Code != http.StatusUnprocessableEntity {
		t.Errorf("another /64 (%s): %d, want 422, its own budget", other, rec.Code)
	}

	v4 := fmt.Sprintf("10.%d.%d.%d", rand.N(256), rand.N(256), rand.N(254)+1)
	for i := range 3 {
		if rec := h.postFrom(t, v4, fmt.Sprintf("u4-%s-%d", run, i), fmt.Sprintf("c4-%s-%d", run, i)); rec.Code != http.StatusUnprocessableEntity {
			t.Fatalf("checkout %d from %s: %d, want 422", i, v4, rec.Code)
		}
	}
	if rec := h.postFrom(t, "[::ffff:"+v4+"]", "u4-mapped-"+run, "c4-mapped-"+run); rec.Code != http.StatusTooManyRequests {
		t.Errorf("::ffff:%s after %s spent its checkouts: %d, want 429 (the same address)", v4, v4, rec.Code)
	}
}

// defaultLimits are the limits `checkout api` runs with when no RATE_LIMIT_* is set.
func defaultLimits(t *testing.T) *api.RateLimits {
	return &api.RateLimits{Limiter: lua.NewRateLimiter(lua.NewCoalescedScripts(testenv.Redis(t))),
		PerAddress:          shop.RateLimit{Rate: api.DefaultRatePerAddress, Burst: 2 * api.DefaultRatePerAddress, Period: time.Second},
		CheckoutsPerAddress: shop.RateLimit{Rate: api.DefaultCheckoutsPerAddress, Burst: api.DefaultCheckoutsPerAddress, Period: time.Minute},
		PerCustomer:         shop.RateLimit{Rate: api.DefaultRatePerCustomer, Burst: api.DefaultRatePerCustomer, Period: time.Minute},
		CheckoutsPerClient:  shop.RateLimit{Rate: api.DefaultCheckoutsPerClient, Burst: api.DefaultCheckoutsPerClient, Period: time.Minute},
	}
}

// serverMode is a harness in server mode (CLIENT_TOKENS) with the default limits, whose one
// client is "shop" (token shopToken), trusting proxies.
func serverMode(t *testing.T, proxies ...string) *harness {
	tokens, err := api.ParseClientTokens("shop=" + shopToken)
	if err != nil {
		t.Fatal(err)
	}
	return newHarness(t, func(cfg *api.Config, d *api.Deps) {
		cfg.ClientTokens = tokens
		for _, p := range proxies {
			_, n, err := net.ParseCIDR(p)
			if err != nil {
				t.Fatal(err)
			}
			cfg.TrustedProxies = append(cfg.TrustedProxies, n)
		}
		d.Owners = d.Records.(api.CheckoutOwners)
		d.RateLimits = defaultLimits(t)
	})
}

const shopToken = "token-of-the-shop-0001"

// postFromBackend sends the shop backend's POST of a cart of an unknown SKU (422 once past the
// limits) from peer, naming the buyer's address in X-Forwarded-For when buyer is set.
func (h *harness) postFromBackend(t *testing.T, peer, buyer, customer, cart string) int {
	t.Helper()
	header := map[string]string{echo.HeaderAuthorization: "Bearer " + shopToken}
	if buyer != "" {
		header[echo.HeaderXForwardedFor] = buyer
	}
	return h.serveFrom(peer+":40000", unknownSKUCart(customer, cart, header)).Code
}

// In server mode the shop's backend is one address for every buyer: with the default limits
// it starts checkouts for 30 customers within a minute, none refused for its address, and
// each customer is still held to its own share.
func TestAShopBackendIsLimitedPerClientNotAsOneAddress(t *testing.T) {
	h := serverMode(t)
	run := testenv.RandomID("")
	backend := fmt.Sprintf("10.%d.%d.%d", rand.N(256), rand.N(256), rand.N(254)+1)
	answers := answersTo(30, func(i int) int {
		return h.postFromBackend(t, backend, "", fmt.Sprintf("u-%s-%d", run, i), fmt.Sprintf("c-%s-%d", run, i))
	})
	if answers[http.StatusUnprocessableEntity] != 30 {
		t.Errorf("30 customers' checkouts from the shop's backend: %v; want 30 x 422, none limited", answers)
	}
	answers = answersTo(api.DefaultRatePerCustomer+1, func(i int) int {
		return h.postFromBackend(t, backend, "", "u-one-"+run, fmt.Sprintf("c-one-%s-%d", run, i))
	})
	if answers[http.StatusUnprocessableEntity] != api.DefaultRatePerCustomer || answers[http.StatusTooManyRequests] != 1 {
		t.Errorf("%d checkouts of one customer through the backend: %v; want the customer's %d and one 429",
			api.DefaultRatePerCustomer+1, answers, api.DefaultRatePerCustomer)
	}
}

// A backend listed in TRUSTED_PROXIES that forwards its buyer's address in X-Forwarded-For
// has that address counted: one buyer inventing customers gets the address's share, another
// buyer their own, and the backend's own calls (no buyer named) no address limit at all.
func TestTheBuyersAddressABackendForwardsIsCounted(t *testing.T) {
	backend := fmt.Sprintf("10.%d.%d.%d", rand.N(256), rand.N(256), rand.N(254)+1)
	h := serverMode(t, backend+"/32")
	run := testenv.RandomID("")
	buyer := fmt.Sprintf("2001:db8:%x:%x::1", rand.N(0xffff)+1, rand.N(0xffff)+1)
	answers := answersTo(api.DefaultCheckoutsPerAddress+2, func(i int) int {
		return h.postFromBackend(t, backend, buyer, fmt.Sprintf("u-%s-%d", run, i), fmt.Sprintf("c-%s-%d", run, i))
	})
	if answers[http.StatusUnprocessableEntity] != api.DefaultCheckoutsPerAddress || answers[http.StatusTooManyRequests] != 2 {
		t.Errorf("%d checkouts forwarded for buyer %s: %v; want %d x 422 and 2 x 429", api.DefaultCheckoutsPerAddress+2, buyer, answers, api.DefaultCheckoutsPerAddress)
	}
	other := fmt.Sprintf("198.18.%d.%d", rand.N(256), rand.N(254)+1)
	if code := h.postFromBackend(t, backend, other, "u-other-"+run, "c-other-"+run); code != http.StatusUnprocessableEntity {
		t.Errorf("another buyer (%s) forwarded by the backend: %d, want 422", other, code)
	}
	for i := range api.DefaultCheckoutsPerAddress + 2 {
		if code := h.postFromBackend(t, backend, "", fmt.Sprintf("u-own-%s-%d", run, i), fmt.Sprintf("c-own-%s-%d", run, i)); code != http.StatusUnprocessableEntity {
			t.Fatalf("the backend's own checkout %d (no buyer named): %d, want 422", i, code)
		}
	}
}
