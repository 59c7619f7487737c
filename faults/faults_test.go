package faults

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/audit"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/shop"
)

// Each fault runs a flash sale of 40 + 15 units to 150 carts (a quarter each paid once, paid
// with the webhook delivered twice, cancelled, or left to expire on a 3 s timer) and strikes
// once a third of the carts have their answer.
const (
	saleCarts = 150
	trigger   = saleCarts / 3
	settleBy  = 60 * time.Second
)

var saleUnits = []skuUnits{{"PHONE", 40}, {"CASE", 15}}

// The service faults run on two stacks at once (each with its own Temporal, Postgres and
// processes), so the suite takes the time of the longer half: outages of each service here,
// stalls, deadlines and forgetting in TestSaleKeepsItsPromisesThroughStallsAndLateEvents.
func TestSaleKeepsItsPromisesThroughServiceFaults(t *testing.T) {
	t.Parallel() // its own stack (newStack)
	s := newStack(t)

	t.Run("worker SIGKILL", func(t *testing.T) {
		sl := newSale(s, saleCarts, saleUnits)
		var down time.Duration
		started := time.Now()
		sl.play(t, trigger, func() {
			at := time.Now()
			s.worker.kill()
			s.worker.start()
			down = time.Since(at)
		})
		sl.report(t, started, "worker killed and restarted in "+down.Round(time.Millisecond).String())
	})

	t.Run("redis restart", func(t *testing.T) {
		sl, started := newSale(s, saleCarts, saleUnits), time.Now()
		var outage string
		sl.play(t, trigger, func() { outage = s.outage(t, "redis", s.redis.kill, pause(2*time.Second), s.redis.start) })
		sl.report(t, started, "redis down (and empty after) "+outage)
	})

	t.Run("postgres stopped", func(t *testing.T) {
		sl, started := newSale(s, saleCarts, saleUnits), time.Now()
		var outage string
		var redeliver []*cart
		sl.play(t, trigger, func() {
			outage = s.outage(t, "postgres", s.pg.stop, func() {
				redeliver = sl.redeliverWhilePostgresIsDown(t)
				time.Sleep(6 * time.Second)
			}, s.pg.start)
		})
		// Redelivered after the outage, like Stripe would: acknowledged as a duplicate.
		for _, c := range redeliver {
			if err := sl.deliverPayment(c); err != nil {
				t.Errorf("redeliver payment of %s: %v", c.id, err)
			}
		}
		sl.report(t, started, "postgres stopped "+outage)
	})

	t.Run("temporal unreachable from the API", func(t *testing.T) {
		sl, started := newSale(s, saleCarts, saleUnits), time.Now()
		var outage string
		sl.play(t, trigger, func() { outage = s.outage(t, "temporal", s.proxy.Cut, pause(5*time.Second), s.proxy.Restore) })
		// Retry every held cart once more: it attaches to its saga (200), never a second one.
		for _, c := range sl.winner {
			code, _, err := s.do(http.MethodPost, "/v1/checkouts", c.body, nil, nil)
			if err != nil || code != http.StatusOK {
				t.Errorf("repeated POST of %s: %d %v; want 200 from its one saga", c.id, code, err)
			}
		}
		sl.report(t, started, "temporal cut off from the API "+outage)
	})

	t.Run("temporal killed and restarted on its file store", func(t *testing.T) {
		sl, started := newSale(s, saleCarts, saleUnits), time.Now()
		var outage string
		sl.play(t, trigger, func() { outage = s.outage(t, "temporal", s.temporal.kill, func() {}, s.temporal.start) })
		sl.report(t, started, "temporal SIGKILLed and back on its db file, down "+outage)
	})

}

// Stalls, deadlines and late or early events, on a stack of their own (see above).
func TestSaleKeepsItsPromisesThroughStallsAndLateEvents(t *testing.T) {
	t.Parallel() // its own stack (newStack)
	s := newStack(t)

	t.Run("payments in the window's last seconds, worker down across the deadline", func(t *testing.T) {
		// Half the holds are paid lateLead before expires_at while no worker runs, the other
		// half expire; the worker comes back only after every deadline has passed. The saga
		// then sees the payment and the fired timer in one workflow task.
		// Every other payer's first card is declined just before: the failure, the payment and
		// the timer then share that task, and the payment must still win (2026-12-03).
		const lateLead = 3 * time.Second
		sl := newSale(s, lateCarts, lateUnits, rolePayLate, roleExpire)
		var inside, late int
		started := time.Now()
		sl.play(t, lateCarts, func() { // every cart has its answer
			s.worker.stop()
			var wg sync.WaitGroup
			var mu sync.Mutex
			var lastDeadline time.Time
			payers := 0
			for _, c := range sl.held() {
				if c.view.ExpiresAt.After(lastDeadline) {
					lastDeadline = *c.view.ExpiresAt
				}
				if c.role != rolePayLate {
					continue
				}
				payers++
				declinedFirst := payers%2 == 0
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Until(c.view.ExpiresAt.Add(-lateLead))) // the buyer pays at the last moment
					if declinedFirst {
						declined := checkouttest.Declined(c.id, c.amount()).Body()
						if err := sl.retry(&sl.webhook5xx, func() (int, error) { return sl.sendPayment(c, declined) }); err != nil {
							t.Errorf("declined card of %s: %v", c.id, err)
							return
						}
					}
					if err := sl.deliverPayment(c); err != nil {
						t.Errorf("late payment of %s: %v", c.id, err)
						return
					}
					c.markPaid()
					mu.Lock()
					defer mu.Unlock()
					if c.ackedAt.Before(*c.view.ExpiresAt) {
						inside++
					} else {
						late++ // the machine was too slow: this one may be refunded instead
					}
				}()
			}
			wg.Wait()
			_ = waitFor(time.Until(lastDeadline)+10*time.Second, func() error {
				if time.Now().After(lastDeadline.Add(time.Second)) {
					return nil
				}
				return errNotYet
			})
			s.worker.start()
		})
		if inside == 0 {
			t.Errorf("no late payment was acknowledged inside its window (%d after it): the case did not happen", late)
		}
		sl.report(t, started, fmt.Sprintf("worker stopped before %d payments acknowledged in the last %s of their window (%d acknowledged after it), back after the last deadline",
			inside, lateLead, late))
	})

	t.Run("worker stalled with SIGSTOP while a second worker runs", func(t *testing.T) {
		second := s.newWorker("second-worker")
		second.start()
		defer second.stop()
		sl := newSale(s, saleCarts, saleUnits)
		started := time.Now()
		sl.play(t, trigger, func() {
			s.worker.pause()
			// The stall outlasts the 10 s workflow task timeout and the end steps' 10 s
			// start-to-close: when the worker wakes, the server has given its tasks to the
			// second worker, and whatever the stale worker does then must change nothing.
			time.Sleep(stallFor)
			s.worker.resume()
		})
		sl.report(t, started, fmt.Sprintf("worker pid %d stalled (SIGSTOP) for %s while worker pid %d ran, then resumed (SIGCONT)",
			s.worker.cmd.Process.Pid, stallFor, second.cmd.Process.Pid))

		// Known defect: the resumed worker is left with all its workflow pollers on its
		// sticky queue (the stale tasks it read on waking carried a sticky backlog hint),
		// none on the checkout queue, until those long polls return empty about a minute
		// later. Alone, it starts no new saga in that time: every POST answers 503.
		if os.Getenv("FAULTS_KNOWN_DEFECTS") != "" {
			second.stop()
			// 40 paid checkouts take a healthy worker 2 to 6 s here (a few POSTs may be shed
			// with 503 and retried); the degraded one dispatches a few first tasks a second,
			// and the sale takes about a minute of POSTs timing out behind them.
			probe := newSale(s, orphanCarts, []skuUnits{{"PROBE", 2 * orphanCarts}}, rolePay)
			at := time.Now()
			probe.play(t, orphanCarts, func() {})
			if took := time.Since(at); took > 20*time.Second {
				t.Errorf("the resumed worker alone took %s for %d paid checkouts (%d POSTs answered 503); want a few seconds (see temporal_num_pollers{poller_type=\"workflow_task\"} on the worker)",
					took.Round(time.Millisecond), orphanCarts, probe.post503.Load())
			}
		}
		// The later faults start from a fresh worker, not from the one left degraded above.
		s.worker.kill()
		s.worker.start()
	})

	t.Run("webhooks before their checkouts", func(t *testing.T) {
		sl := newSale(s, orphanCarts, orphanUnits, rolePayFirst)
		started := time.Now()
		sl.payBeforeCheckout(t)
		sl.play(t, orphanCarts, func() {})
		sl.checkPaidBy(t)
		sl.report(t, started, fmt.Sprintf("%d payments acknowledged as orphans before their carts were posted", len(sl.carts)))
	})

	// Last: it moves the product onto a fresh Temporal server.
	t.Run("temporal forgets finished sagas", func(t *testing.T) {
		sl := newSale(s, saleCarts, saleUnits)
		started := time.Now()
		sl.play(t, trigger, func() {})
		if _, n := sl.settle(t, settleBy); n > 0 {
			t.Fatalf("%d violations before temporal forgot the sale", n)
		}
		sl.forgetAndRetry(t)
		sl.report(t, started, "a fresh temporal (new db file) over the same postgres and redis; every cart posted and read again")
	})
}

// The smaller sales of the newer faults: each fault needs fewer carts to happen, and the
// suite must stay within a few minutes on a shared 2-core machine.
const (
	lateCarts   = 40
	orphanCarts = 40
	// stallFor: see the SIGSTOP fault.
	stallFor = 12 * time.Second
)

var (
	lateUnits = []skuUnits{{"PHONE", 24}, {"CASE", 6}}
	// orphanUnits are exactly what the orphan carts ask for (1 or 2 phones each, a case for
	// one in five): every paid buyer can have their units, so none may be refunded.
	orphanUnits = []skuUnits{{"PHONE", orphanCarts / 2 * 3}, {"CASE", orphanCarts / 5}}
)

// expectNotReady polls /readyz until it answers 503 naming the dependency that is down.
// outage takes dep down with stop, checks that /readyz names it, runs during (the outage),
// brings dep back with start, and says how long it was down and what /readyz answered.
func (s *stack) outage(t *testing.T, dep string, stop, during, start func()) string {
	at := time.Now()
	stop()
	readyz := s.expectNotReady(t, dep)
	during()
	start()
	return "for " + time.Since(at).Round(time.Millisecond).String() + "; " + readyz
}

func pause(d time.Duration) func() { return func() { time.Sleep(d) } }

// redeliverWhilePostgresIsDown redelivers the events of a few paid carts, as Stripe does
// now and then: while Postgres is down such an event cannot be recorded and must be
// answered 5xx. It returns those carts, to redeliver after the outage.
func (sl *sale) redeliverWhilePostgresIsDown(t *testing.T) (redeliver []*cart) {
	for _, c := range sl.paidSoFar(5) {
		code, _ := sl.sendPayment(c, sl.paymentEvent(c))
		if code < 500 {
			t.Errorf("webhook for %s with postgres down: %d, want 5xx", c.id, code)
		} else {
			sl.webhook5xx.Add(1)
		}
		redeliver = append(redeliver, c)
	}
	return redeliver
}

func (s *stack) expectNotReady(t *testing.T, dep string) string {
	var code int
	var checks map[string]string
	err := waitFor(10*time.Second, func() error {
		code, checks = s.readyz()
		if code == http.StatusServiceUnavailable && strings.HasPrefix(checks[dep], "unavailable") {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		t.Errorf("/readyz with %s down: %d %v; want 503 naming %s", dep, code, checks, dep)
		return "/readyz did not say so"
	}
	return "/readyz 503: " + dep + " unavailable"
}

// report checks the invariants (polling until they hold) and logs the run's figures.
func (sl *sale) report(t *testing.T, started time.Time, fault string) {
	sl.checkEnds(t)
	faultOver := time.Since(started)
	took, violations := sl.settle(t, settleBy)
	// The operator's audit, across Postgres, Redis and Temporal, must agree: nothing to act on.
	report, err := checkouttest.CheckInvariants(t.Context(), audit.New(sl.s.pool, sl.s.rdb, sl.s.tc, audit.Options{Grace: -1}))
	if err != nil {
		t.Errorf("audit after the fault: %v", err)
	}
	violations += len(report.Violations)
	f := sl.figures()
	t.Logf("%s", fault)
	t.Logf("figures: held %d, paid %d, confirmed %d, refunded %d, violations %d",
		f.winners, f.paid, f.ends[shop.StatusConfirmed], f.refunded, violations)
	t.Logf("%d carts -> %d held (%d answered 201, %d attached to their saga on a retry), %d out_of_stock; %d POSTs answered 503 (%d without Retry-After), %d other 5xx; webhooks answered 5xx %d times, cancels %d times (all redelivered)",
		f.carts, f.winners, f.created, f.winners-f.created, f.rejected, sl.post503.Load(), sl.noRetryAfter.Load(), sl.post5xx.Load(), sl.webhook5xx.Load(), sl.cancel5xx.Load())
	if n := sl.not503.Load(); n > 0 {
		t.Errorf("the API answered a 5xx other than 503 %d times; the contract answers a passing cause with 503 and Retry-After", n)
	}
	if sl.post5xx.Load() > 0 || sl.cancel5xx.Load() > 0 {
		// Name the causes the API logged for its 500s (the client only sees internal_error):
		// each distinct error once, with how often it came.
		counts, order := map[string]int{}, []string(nil)
		for _, line := range strings.Split(tail(filepath.Join(sl.s.dir, "api.log"), 1<<30), "\n") {
			if !strings.Contains(line, `"internal_error"`) || !strings.Contains(line, "/v1/checkouts") {
				continue
			}
			var entry struct{ Path, Error string }
			_ = json.Unmarshal([]byte(line), &entry)
			key := entry.Path + ": " + entry.Error
			if strings.HasSuffix(entry.Path, "/cancel") {
				key = "/v1/checkouts/{id}/cancel: " + entry.Error
			}
			if counts[key] == 0 {
				order = append(order, key)
			}
			counts[key]++
		}
		for _, key := range order {
			t.Logf("the API answered 500 %d times with: %.600s", counts[key], key)
		}
	}
	if n := sl.supportRetries.Load(); n > 0 {
		t.Logf("%d stuck checkouts retried through POST /v1/admin/checkouts/{id}/retry, as support would", n)
	}
	if sl.refusedButStarted > 0 {
		t.Logf("%d carts answered out_of_stock had a saga still running (cancelled by the suite)", sl.refusedButStarted)
	}
	t.Logf("ends: confirmed %d, expired %d, cancelled %d, failed %d; sale over after %s, invariants held %s later",
		f.ends[shop.StatusConfirmed], f.ends[shop.StatusExpired], f.ends[shop.StatusCancelled], f.failed,
		faultOver.Round(time.Millisecond), took.Round(time.Millisecond))
	for _, sku := range sl.skus() {
		var onHand, sold int64
		_ = sl.s.pool.QueryRow(t.Context(), `SELECT on_hand, sold FROM skus WHERE sku = $1`, sku).Scan(&onHand, &sold)
		t.Logf("%s: stocked %d, sold %d, on_hand %d", sku, sl.stock[sku], sold, onHand)
	}
}
