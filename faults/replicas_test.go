package faults

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// replicaStarting is each replica's MAX_STARTING_CHECKOUTS: two sagas started at once, so a
// burst of carts forms a line that both replicas take from.
const replicaStarting = 2

// replicaClientToken is the shop backend's token the replicas take (IDENTITY_MODE=server).
const replicaClientToken = "faults-suite-client-token-0123456789"

// Two API replicas as processes share the room's one line; one is SIGKILLed while carts wait
// in line and some of its carts are being started (taken from the line under a lease). Each
// buyer talks to its replica and, when that one stops answering, to the other, as behind a
// load balancer. Every buyer gets a final answer (a hold or out_of_stock) from the survivor:
// a cart the dead replica was starting comes back in line when its lease runs out, and the
// survivor starts it. Exactly the stock's units are sold, and nothing is left in the room
// or held in Redis.
func TestAReplicaKilledWhileCartsWaitForgetsNoCart(t *testing.T) {
	t.Parallel() // its own stack (newStack)
	s := newStack(t)
	replicas := []*apiProcess{s.newAPI("api-a"), s.newAPI("api-b")}
	const carts, units = 60, 20
	sl := newSale(s, carts, []skuUnits{{"PHONE", units}}, rolePay)
	for _, c := range sl.carts { // one unit each: every unit finds a buyer
		c.items[0].Quantity = 1
		timeout := c.role.timeout()
		c.body, _ = json.Marshal(api.CheckoutRequest{CartID: c.id, CustomerID: "u-" + c.id, Items: c.items, PaymentTimeoutSeconds: &timeout})
	}
	room := lua.NewRoom(s.rdb, lua.DefaultRoomName) // the replicas' room

	// The kill: once carts wait in line and replica a is starting some. a is frozen
	// (SIGSTOP) while the room is read, so what the room says it starts stays true until the
	// SIGKILL; more carts being started than one replica may start at once means a has some.
	killed := make(chan shop.RoomStatus, 1)
	go func() {
		var st shop.RoomStatus
		err := waitFor(clientDeadline, func() error {
			replicas[0].freeze(true)
			var err error
			if st, err = room.Status(context.Background()); err == nil && st.Waiting > 0 && st.Starting > replicaStarting {
				return nil
			}
			replicas[0].freeze(false)
			return cmp.Or(err, errNotYet)
		})
		if err != nil {
			t.Errorf("no moment with carts in line and both replicas starting carts: %v (last status %+v)", err, st)
		}
		replicas[0].kill()
		killed <- st
	}()

	var wg sync.WaitGroup
	for i, c := range sl.carts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := finalAnswer(replicas, i%2, c); err != nil {
				t.Errorf("cart %s forgotten: %v", c.id, err)
				return
			}
			if sl.answer(t, c) {
				if err := sl.deliverPayment(c); err != nil {
					t.Errorf("pay %s: %v", c.id, err)
					return
				}
				c.markPaid()
			}
		}()
	}
	wg.Wait()
	st := <-killed
	t.Logf("replica a killed with %d carts in line and %d being started; %d of %d carts held a unit",
		st.Waiting, st.Starting, len(sl.winner), carts)
	if len(sl.winner) != units {
		t.Errorf("%d carts held a unit, want %d (the stock's units, one a cart)", len(sl.winner), units)
	}
	deadline := time.Now().Add(clientDeadline)
	for _, c := range sl.winner {
		if err := sl.waitFinal(c, deadline); err != nil {
			t.Error(err)
		}
	}
	sl.checkEnds(t)

	// A cart the dead replica was starting may have had its answer from its saga already; it
	// stays in the room, being started, until its lease runs out and the survivor starts it
	// again (attaching to its saga). Then the room is empty.
	ctx := context.Background()
	var st2 shop.RoomStatus
	if err := waitFor(lua.DefaultRoomLease+clientDeadline, func() error {
		var err error
		if st2, err = room.Status(ctx); err == nil && (st2.Waiting != 0 || st2.Starting != 0 || st2.BeforeSale != 0 || len(st2.SpokenFor) != 0) {
			err = errNotYet
		}
		return err
	}); err != nil {
		t.Errorf("the room after the sale: %+v (%v), want it empty", st2, err)
	}
	for _, c := range sl.carts {
		if place, err := room.Lookup(ctx, c.id); err != nil || place.InLine() || place.State == shop.PlaceLeaving || place.Entry != nil {
			t.Errorf("cart %s is still in the room after the sale: %+v (%v)", c.id, place, err)
		}
	}
	sl.settle(t, settleBy) // after the room emptied: a second start must not have made a second saga
	sku := sl.skus()[0]
	if level, err := s.rdb.HMGet(ctx, lua.StockKey(sku), "available", "held").Result(); err != nil || level[0] != "0" || level[1] != "0" {
		t.Errorf("%s in redis: available, held = %v (%v), want every unit sold and none held", sku, level, err)
	}
}

// finalAnswer checks a cart out through the replicas, starting with replicas[first] and
// moving to the other when one does not answer, until the cart holds (awaiting payment) or
// is refused, or clientDeadline passes.
func finalAnswer(replicas []*apiProcess, first int, c *cart) error {
	ctx, cancel := context.WithTimeout(context.Background(), clientDeadline) // a forgotten cart's GETs never end
	defer cancel()
	at := first
	var last string
	for ctx.Err() == nil {
		var v api.CheckoutView
		a, err := replicas[at].client.Checkout(ctx, c.body, nil, &v)
		switch {
		case err != nil && a.Code == 0 && ctx.Err() == nil: // the replica is gone: the load balancer sends the next try elsewhere
			at = (at + 1) % len(replicas)
		case a.Code == http.StatusConflict || (a.Code == http.StatusOK || a.Code == http.StatusCreated) &&
			(v.Status == shop.StatusAwaitingPayment || v.Status.Final()):
			c.code, c.view, c.created = a.Code, v, a.Code == http.StatusCreated || v.Status == shop.StatusAwaitingPayment
			return nil
		}
		last = fmt.Sprintf("%d %s %v (%v)", a.Code, v.Status, a.Attempts, err)
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("no final answer by the deadline; last: %s", last)
}

// apiProcess is `checkout api` as a child process, so a fault can SIGKILL it.
type apiProcess struct {
	cmd    *exec.Cmd
	log    string
	client *checkouttest.Client
	exited chan struct{}
}

// newAPI starts an API replica on the stack's services and waits for its /readyz; the test's
// end stops it.
func (s *stack) newAPI(name string) *apiProcess {
	s.t.Helper()
	addr := "127.0.0.1:" + testenv.FreePort(s.t)
	p := &apiProcess{log: filepath.Join(s.dir, name+".log"), client: checkouttest.NewClient("http://" + addr)}
	p.client.MaxRetries = 10
	p.client.Header = checkouttest.ShopBackend(replicaClientToken)
	p.cmd = exec.Command(s.bin, "api")
	p.cmd.Env = append(os.Environ(),
		"API_ADDR="+addr, "API_METRICS_ADDR=127.0.0.1:"+testenv.FreePort(s.t),
		"TEMPORAL_ADDRESS="+s.temporal.addr, "TEMPORAL_NAMESPACE=default",
		"REDIS_URL="+s.redisURL, "DATABASE_URL="+s.pg.url(),
		"ADMIN_TOKEN="+adminToken, "STRIPE_WEBHOOK_SECRET=whsec_faults_suite_replica_secret_0123",
		"CHECKOUT_SECRET_KEY="+checkouttest.CheckoutSecretKey,
		"IDENTITY_MODE=server", "CLIENT_TOKENS=faults="+replicaClientToken,
		"STRIPE_API_KEY=", "STRIPE_API_URL=", "LOG_LEVEL=warn", "API_DRAIN_DELAY_SECONDS=0",
		"MAX_STARTING_CHECKOUTS="+fmt.Sprint(replicaStarting),
		// Every buyer comes from this machine's address: no limit per address or customer.
		"RATE_LIMIT_PER_ADDRESS=0", "RATE_LIMIT_CHECKOUTS_PER_ADDRESS=0", "RATE_LIMIT_PER_CUSTOMER=0",
		"MAX_WAITS_PER_ADDRESS=100000",
	)
	p.exited = startLogged(s.t, p.cmd, p.log, name)
	s.t.Cleanup(func() {
		if p.cmd != nil {
			stopProcess(p.cmd, p.exited, syscall.SIGTERM, 15*time.Second)
		}
		if s.t.Failed() {
			s.t.Logf("last lines of %s:\n%s", filepath.Base(p.log), lastLines(p.log, 20, nil))
		}
	})
	exited := false
	err := waitFor(90*time.Second, func() error {
		select {
		case <-p.exited:
			exited = true
			return nil
		default:
		}
		a, err := (&checkouttest.Client{BaseURL: p.client.BaseURL, HTTP: p.client.HTTP}).Do(context.Background(), http.MethodGet, "/readyz", nil, nil, nil)
		if err == nil && a.Code != http.StatusOK {
			err = fmt.Errorf("/readyz answered %d", a.Code)
		}
		return err
	})
	if exited || err != nil {
		s.t.Fatalf("%s not ready (exited: %v): %v\n%s", name, exited, err, tail(p.log, 3000))
	}
	return p
}

// freeze stops (SIGSTOP) or resumes (SIGCONT) the replica: frozen, it keeps its connections
// and the starts it makes, and does nothing.
func (p *apiProcess) freeze(frozen bool) {
	sig := syscall.SIGCONT
	if frozen {
		sig = syscall.SIGSTOP
	}
	_ = p.cmd.Process.Signal(sig)
}

// kill sends SIGKILL: the replica's requests in flight and the starts it was making are lost
// with it.
func (p *apiProcess) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	p.cmd = nil
}
