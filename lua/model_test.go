package lua

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// The model check drives the real scripts on real Redis beside a small reference model of
// what Postgres would know (on_hand, the open checkouts and which of them really hold), with
// random sequences of reserve, release, commit, forfeit, rebuild, reconcile, operator
// changes, full loss (every key of the SKU deleted) and partial loss (an earlier DUMP of the
// SKU's keys restored), some of them from concurrent goroutines. It recovers the way package
// activities does: on ErrNotStocked or ErrRolledBack it resyncs the SKU from the model
// (Rebuild or Reconcile) and tries again. After every step it checks:
//
//   - no reserve succeeds beyond the units not held (really held + quantity <= on_hand);
//   - real holds never exceed on_hand;
//   - every hold ends at most once (released, committed or forfeited);
//   - between losses, available + held never exceeds on_hand, and at rest (after the
//     reconciler ran with nothing in flight) available + held == on_hand exactly.
//
// Replay a failure with its seed: go test ./lua/ -run TestStockScriptsKeepTheModelsInvariantsOverRandomSteps -model.seed=N (or
// MODEL_SEED=N); run longer with -model.steps.
var (
	modelSeed  = flag.Uint64("model.seed", 0, "seed of TestStockScriptsKeepTheModelsInvariantsOverRandomSteps (0: random, or MODEL_SEED)")
	modelSteps = flag.Int("model.steps", 5000, "steps of TestStockScriptsKeepTheModelsInvariantsOverRandomSteps")
	modelTrace = flag.Bool("model.trace", false, "log every step of TestStockScriptsKeepTheModelsInvariantsOverRandomSteps")
)

type modelCheckout struct {
	id    string
	qty   int64
	held  bool // a reserve succeeded and the hold has not ended
	ended int  // how many times its hold ended with units (must stay <= 1)
}

type model struct {
	t      *testing.T
	s      *Stock
	rdb    *redis.Client
	sku    string
	rng    *rand.Rand
	onHand int64
	open   map[string]*modelCheckout // recorded, not ended: the superset of holds
	all    []*modelCheckout          // the open ones and the last few ended, in creation order
	next   int
	dirty  bool // Redis lost data since the last resync: its counters are not to be trusted
	dumps  []map[string]string
	step   int
	mu     sync.Mutex
	stats  map[string]int
	// concurrent is set while a burst's goroutines run.
	concurrent bool
	// finish is how each ended holder's hold ended ("release", "commit" or "forfeit"), for
	// the reconciler to end a hold an earlier snapshot brought back.
	finish map[string]string
	// recorded are the holders whose end Postgres wrote: confirmed orders, written changes.
	// A resync passes those with a live hold as settled, as activities.Store.ResyncStock does.
	recorded map[string]bool
	// With srv, the model runs over a Redis of its own, as several processes: each step is
	// taken by one of procs (workers and APIs, each with its own memory of gens), a process
	// restarts now and then (a new Stock), and a loss is a real restart of Redis from one of
	// its older snapshots (snaps) instead of restored keys.
	srv   *testenv.RedisServer
	procs []*Stock
	snaps []string
	// maxWaiting, if not 0, bounds the open checkouts still reserving: their placeholders
	// after a resync take units, and a model full of them holds little for real.
	maxWaiting int
}

// waiting counts the open checkouts that do not hold (still reserving).
func (m *model) waiting() int {
	n := 0
	for _, c := range m.open {
		if !c.held {
			n++
		}
	}
	return n
}

const modelMaxPerOrder = 3

func (m *model) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Errorf("step %d (replay with -model.seed=%d): %s", m.step, seedUsed, fmt.Sprintf(format, args...))
	if m.concurrent {
		runtime.Goexit() // a burst's goroutine; the burst stops the test once it is over
	}
	m.t.FailNow()
}

var seedUsed uint64

func (m *model) heldUnits() int64 {
	var n int64
	for _, c := range m.open {
		if c.held {
			n += c.qty
		}
	}
	return n
}

func (m *model) openHolds() []Hold {
	var out []Hold
	for _, c := range m.all {
		if _, open := m.open[c.id]; open {
			out = append(out, Hold{c.id, c.qty})
		}
	}
	return out
}

// resync is what activities.Store.ResyncStock does: rebuild a lost SKU, else reconcile.
func (m *model) resync(ctx context.Context) {
	l, err := m.s.Level(ctx, m.sku)
	if err != nil {
		m.fail("level: %v", err)
	}
	holds, err := m.s.Holds(ctx, m.sku)
	if err != nil {
		m.fail("holds: %v", err)
	}
	var settled []string
	for _, h := range holds {
		if m.recorded[h.CheckoutID] {
			settled = append(settled, h.CheckoutID)
		}
	}
	if !l.Stocked {
		if _, _, err := m.s.Rebuild(ctx, m.sku, m.onHand, modelMaxPerOrder, m.openHolds(), settled, 0); err != nil {
			m.fail("rebuild: %v", err)
		}
	} else if _, err := m.s.Reconcile(ctx, m.sku, m.onHand, m.openHolds(), settled, 0); err != nil {
		m.fail("reconcile: %v", err)
	}
	m.dirty = false
	m.stats["resync"]++
}

// endAs ends a holder's hold the way it ended (or is to end).
func (m *model) endAs(ctx context.Context, holder, how string) error {
	var err error
	switch how {
	case "commit":
		_, err = m.s.Commit(ctx, m.sku, holder)
	case "forfeit":
		_, err = m.s.Forfeit(ctx, m.sku, holder)
	default:
		_, err = m.s.Release(ctx, m.sku, holder)
	}
	return err
}

// reconciler is activities.ReconcileStock: holds of holders that ended (brought back by an
// older snapshot, or whose end never reached Redis) are ended the way they ended, then the
// SKU is resynced.
func (m *model) reconciler(ctx context.Context) {
	holds, err := m.s.Holds(ctx, m.sku)
	if err != nil {
		m.fail("holds: %v", err)
	}
	for _, h := range holds {
		if _, open := m.open[h.CheckoutID]; open {
			continue
		}
		how, ended := m.finish[h.CheckoutID]
		if !ended {
			m.fail("a hold of %d by %s, which the model never heard of", h.Quantity, h.CheckoutID)
		}
		err := m.retried(ctx, func() error { return m.endAs(ctx, h.CheckoutID, how) })
		if err != nil && !errors.Is(err, ErrNoHold) && !errors.Is(err, ErrHoldReleased) && !errors.Is(err, ErrHoldCommitted) {
			m.fail("end the leftover hold of %s (%s): %v", h.CheckoutID, how, err)
		}
		m.stats["leftover hold ended"]++
	}
	m.resync(ctx)
}

// retried runs op, resyncing once when Redis lost the SKU or went back in time.
func (m *model) retried(ctx context.Context, op func() error) error {
	err := op()
	if errors.Is(err, ErrRolledBack) || errors.Is(err, ErrNotStocked) {
		m.resync(ctx)
		err = op()
	}
	return err
}

func (m *model) newCheckout() *modelCheckout {
	m.next++
	c := &modelCheckout{id: "m-" + strconv.Itoa(m.next), qty: 1 + m.rng.Int64N(modelMaxPerOrder)}
	m.open[c.id] = c
	m.all = append(m.all, c)
	return c
}

func (m *model) pick(held bool) *modelCheckout {
	var cands []*modelCheckout
	for _, c := range m.all { // in creation order, so a seed replays
		if _, open := m.open[c.id]; open && c.held == held {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[m.rng.IntN(len(cands))]
}

// reserved records a reserve's outcome; the caller holds m.mu.
func (m *model) reserved(c *modelCheckout, res ReserveResult, err error) {
	switch {
	case err == nil && !res.AlreadyHeld:
		if held := m.heldUnits(); held+c.qty > m.onHand {
			m.fail("reserve of %d for %s succeeded with %d of %d on hand really held", c.qty, c.id, held, m.onHand)
		}
		if m.dirty {
			m.grantedOnALossyRedis(c)
		}
		c.held = true
		m.stats["reserve ok"]++
	case err == nil:
		if !c.held {
			// A placeholder from a resync, given back and judged again, answers as a new
			// hold; ALREADY_HELD is only for a checkout that really holds.
			m.fail("reserve of %s answered already held, but it never held", c.id)
		}
	case errors.Is(err, ErrOutOfStock):
		m.stats["reserve refused"]++
	default:
		m.fail("reserve of %s: %v", c.id, err)
	}
}

// grantedOnALossyRedis fails the test when a hold was granted on a Redis that lost a real
// hold and has not been resynced since: the lost hold's units were free to take twice, even
// if on_hand happens to cover both this time.
func (m *model) grantedOnALossyRedis(c *modelCheckout) {
	holds, err := m.s.Holds(m.t.Context(), m.sku)
	if err != nil {
		m.fail("holds: %v", err)
	}
	live := map[string]bool{}
	for _, h := range holds {
		live[h.CheckoutID] = true
	}
	for _, o := range m.all {
		if _, open := m.open[o.id]; open && o.held && o != c && !live[o.id] {
			m.fail("reserve of %s granted while Redis has lost %s's hold and was not resynced", c.id, o.id)
		}
	}
}

func (m *model) endHold(c *modelCheckout, units int64, how string) {
	m.finish[c.id] = how
	if units > 0 {
		c.ended++
		if c.ended > 1 {
			m.fail("the hold of %s ended twice (%s)", c.id, how)
		}
	}
	c.held = false
	delete(m.open, c.id)
	// Forget ended checkouts beyond the last few, so dumps and losses stay small.
	const keepEnded = 16
	ended := 0
	kept := make([]*modelCheckout, 0, len(m.all))
	for i := len(m.all) - 1; i >= 0; i-- {
		if _, open := m.open[m.all[i].id]; open || ended < keepEnded {
			if !open {
				ended++
			}
			kept = append(kept, m.all[i])
		}
	}
	for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
		kept[i], kept[j] = kept[j], kept[i]
	}
	m.all = kept
}

// skuKeys lists every key of the SKU (stock, holds and tombstones), as a snapshot sees them.
func (m *model) skuKeys(ctx context.Context) []string {
	keys, err := m.rdb.Keys(ctx, "*{"+m.sku+"}*").Result()
	if err != nil {
		m.fail("list keys: %v", err)
	}
	return keys
}

// dumpKeys copies every key of the SKU, as the snapshot a Redis may restart from.
func (m *model) dumpKeys(ctx context.Context) map[string]string {
	d := map[string]string{}
	for _, k := range m.skuKeys(ctx) {
		v, err := m.rdb.Dump(ctx, k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			m.fail("dump %s: %v", k, err)
		}
		d[k] = v
	}
	return d
}

// restore brings the SKU's keys back to a snapshot: keys written since are gone.
func (m *model) restore(ctx context.Context, d map[string]string) {
	if keys := m.skuKeys(ctx); len(keys) > 0 {
		m.rdb.Del(ctx, keys...)
	}
	for k, v := range d {
		if v != "" {
			if err := m.rdb.Restore(ctx, k, 0, v).Err(); err != nil {
				m.fail("restore %s: %v", k, err)
			}
		}
	}
}

func (m *model) check(ctx context.Context, atRest bool) {
	if held := m.heldUnits(); held > m.onHand {
		m.fail("real holds %d exceed on_hand %d", held, m.onHand)
	}
	if m.dirty {
		return
	}
	l, err := m.s.Level(ctx, m.sku)
	if err != nil {
		m.fail("level: %v", err)
	}
	if !l.Stocked {
		return
	}
	// Exact whenever Redis is trusted, not only after the reconciler: a resync that ran
	// while a hold's end was half done must not leave a unit short once the end finished.
	if l.Available+l.Held != m.onHand {
		m.fail("available %d + held %d vs on_hand %d (at rest: %v)", l.Available, l.Held, m.onHand, atRest)
	}
	holds, err := m.s.Holds(ctx, m.sku)
	if err != nil {
		m.fail("holds: %v", err)
	}
	var sum int64
	for _, h := range holds {
		sum += h.Quantity
	}
	if sum != l.Held {
		m.fail("held %d, but the holds add up to %d", l.Held, sum)
	}
}

// change is an operator's change of on_hand as activities.Inventory runs it: stage, then the
// Postgres write (here the model; refused now and then), then finish or undo.
func (m *model) change(ctx context.Context, delta int64) {
	id := "ichg" + strconv.Itoa(m.step)
	if delta < 0 {
		id = "dchg" + strconv.Itoa(m.step)
	}
	stage := func() error { _, err := m.s.StageChange(ctx, m.sku, id, delta, modelMaxPerOrder); return err }
	err := m.retried(ctx, stage)
	if errors.Is(err, shop.ErrInsufficientStock) {
		// Redis may undersell until the reconciler ran (a hold committed after a resync
		// counted it, a hold an older snapshot brought back); the operator's retry after it
		// must be judged exactly.
		m.reconciler(ctx)
		err = stage()
	}
	if errors.Is(err, shop.ErrInsufficientStock) {
		// Refusing is right while the open checkouts (which may hold placeholders) leave
		// too little; wrong when even all of them leave room.
		var open int64
		for _, h := range m.openHolds() {
			open += h.Quantity
		}
		if m.onHand-open >= -delta && !m.dirty {
			m.fail("a decrease of %d refused with %d on hand, %d in open checkouts", -delta, m.onHand, open)
		}
		m.stats["change refused"]++
		return
	}
	if err != nil {
		m.fail("stage %+d: %v", delta, err)
	}
	applied := m.rng.IntN(5) > 0
	holder := ChangeHoldID(id)
	if applied {
		m.onHand += delta
	}
	m.recorded[holder] = applied
	if m.rng.IntN(3) == 0 {
		// A resync between the Postgres write (or its refusal) and the Redis step.
		m.resync(ctx)
		m.stats["resync before change finish"]++
	}
	switch {
	case delta < 0 && applied:
		m.finish[holder] = "commit"
	case delta > 0 && !applied:
		m.finish[holder] = "forfeit"
	default:
		m.finish[holder] = "release"
	}
	err = m.retried(ctx, func() error { return m.endAs(ctx, holder, m.finish[holder]) })
	if err != nil {
		m.fail("finish change %+d (applied %v): %v", delta, applied, err)
	}
	m.stats["change"]++
}

func TestStockScriptsKeepTheModelsInvariantsOverRandomSteps(t *testing.T) {
	seed := modelSeedFor(t)
	rdb := testClient(t)
	m := newModel(t, seed, rdb, New(rdb), 20)
	m.run(*modelSteps)
}

// TestStockScriptsKeepTheModelsInvariantsAcrossRestartsAndWorkers is the model check over
// three processes sharing one Redis that restarts from older RDB snapshots at random
// points, while processes restart too: no process, whatever it saw and whenever it
// started, may grant a hold the units do not cover.
func TestStockScriptsKeepTheModelsInvariantsAcrossRestartsAndWorkers(t *testing.T) {
	seed := modelSeedFor(t)
	srv := testenv.StartRedisServer(t)
	rdb := srv.Client()
	// Fewer units than the open checkouts want, so a unit counted twice shows at once.
	m := newModel(t, seed, rdb, New(rdb), 8)
	m.srv = srv
	m.maxWaiting = 1
	m.procs = []*Stock{m.s, New(rdb), New(rdb)}
	m.run(*modelSteps / 5)
}

func modelSeedFor(t *testing.T) uint64 {
	seed := *modelSeed
	if seed == 0 {
		if s, err := strconv.ParseUint(os.Getenv("MODEL_SEED"), 10, 64); err == nil {
			seed = s
		} else {
			seed = uint64(time.Now().UnixNano())
		}
	}
	seedUsed = seed
	t.Logf("seed %d (replay with -model.seed=%d)", seed, seed)
	return seed
}

func newModel(t *testing.T, seed uint64, rdb *redis.Client, s *Stock, onHand int64) *model {
	sku := testSKU(t, rdb)
	m := &model{t: t, s: s.WithTombstoneTTL(time.Hour), rdb: rdb, sku: sku, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		onHand: onHand, open: map[string]*modelCheckout{}, stats: map[string]int{}, finish: map[string]string{}, recorded: map[string]bool{}}
	if _, err := m.s.SetStock(t.Context(), sku, m.onHand, modelMaxPerOrder); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *model) run(steps int) {
	t, rdb, sku, ctx := m.t, m.rdb, m.sku, m.t.Context()
	start := time.Now()
	for m.step = 1; m.step <= steps; m.step++ {
		atRest := false
		if len(m.procs) > 0 {
			i := m.rng.IntN(len(m.procs))
			if m.rng.IntN(50) == 0 { // the process restarts: it remembers nothing
				m.procs[i] = New(rdb).WithTombstoneTTL(time.Hour)
				m.stats["process restart"]++
			}
			m.s = m.procs[i]
		}
		switch r := m.rng.IntN(100); {
		case r < 30: // a new checkout reserves
			if len(m.open) > 12 {
				continue // the buyers are busy paying
			}
			c := m.newCheckout()
			var res ReserveResult
			err := m.retried(ctx, func() (err error) { res, err = m.s.Reserve(ctx, sku, c.id, c.qty); return err })
			m.reserved(c, res, err)
			if err != nil {
				m.endHold(c, m.release(ctx, c), "release after refusal")
			}
		case r < 33: // a checkout still reserving when something else happens; it reserves later
			if c := m.pick(false); c != nil && (m.rng.IntN(2) == 0 || m.waiting() >= m.maxWaiting && m.maxWaiting > 0) {
				var res ReserveResult
				err := m.retried(ctx, func() (err error) { res, err = m.s.Reserve(ctx, sku, c.id, c.qty); return err })
				m.reserved(c, res, err)
				if err != nil {
					m.endHold(c, m.release(ctx, c), "release after refusal")
				}
			} else {
				m.newCheckout()
			}
		case r < 45: // release (expired, cancelled), also of one still reserving
			c := m.pick(m.rng.IntN(2) == 0)
			if c != nil {
				m.endHold(c, m.release(ctx, c), "release")
			}
		case r < 57: // paid: Postgres takes the units, then the hold is committed
			c := m.pick(true)
			if c == nil {
				continue
			}
			m.onHand -= c.qty
			delete(m.open, c.id)
			m.recorded[c.id] = true
			if m.rng.IntN(3) == 0 {
				// A resync (another activity's, the reconciler's) between the order and the commit.
				m.resync(ctx)
				m.stats["resync before commit"]++
			}
			var n int64
			err := m.retried(ctx, func() (err error) { n, err = m.s.Commit(ctx, sku, c.id); return err })
			if errors.Is(err, ErrNoHold) {
				m.resync(ctx) // CommitStock reconciles: the lost hold's units are gone
				err = nil
			}
			if err != nil {
				m.fail("commit of %s: %v", c.id, err)
			}
			m.endHold(c, n, "commit")
		case r < 60: // paid, but Postgres refused the order: forfeit, then reconcile
			c := m.pick(true)
			if c == nil {
				continue
			}
			var n int64
			if err := m.retried(ctx, func() (err error) { n, err = m.s.Forfeit(ctx, sku, c.id); return err }); err != nil {
				m.fail("forfeit of %s: %v", c.id, err)
			}
			m.endHold(c, n, "forfeit")
			m.resync(ctx)
		case r < 66: // the reconciler, with nothing in flight: at rest
			m.reconciler(ctx)
			atRest = true
		case r < 72: // operator change, mostly restocks so the sale goes on
			m.change(ctx, m.rng.Int64N(13)-4)
		case r < 80: // remember a copy Redis may restart from later
			if m.srv != nil {
				m.snaps = append(m.snaps, m.srv.Snapshot())
				if len(m.snaps) > 4 {
					m.snaps = m.snaps[1:]
				}
				continue
			}
			m.dumps = append(m.dumps, m.dumpKeys(ctx))
			if len(m.dumps) > 4 {
				m.dumps = m.dumps[1:]
			}
		case r < 84: // partial loss: Redis goes back to an earlier copy
			if m.srv != nil && len(m.snaps) > 0 {
				m.srv.RestartFrom(m.snaps[m.rng.IntN(len(m.snaps))])
				for i := range m.procs { // a host reboot restarts the processes on it too
					if m.rng.IntN(2) == 0 {
						m.procs[i] = New(rdb).WithTombstoneTTL(time.Hour)
					}
				}
				m.dirty = true
				m.stats["restart from an older snapshot"]++
				continue
			}
			if len(m.dumps) == 0 {
				continue
			}
			m.restore(ctx, m.dumps[m.rng.IntN(len(m.dumps))])
			m.dirty = true
			m.stats["partial loss"]++
		case r < 86: // full loss
			if keys := m.skuKeys(ctx); len(keys) > 0 {
				rdb.Del(ctx, keys...)
			}
			m.dirty = true
			m.stats["full loss"]++
		default: // a burst of concurrent reserves (and a reconcile) while on_hand stands still
			m.burst(ctx)
		}
		if *modelTrace {
			l, _ := m.s.Level(ctx, sku)
			holds, _ := m.s.Holds(ctx, sku)
			t.Logf("step %d: on_hand %d, really held %d, dirty %v; redis %+v holds %v; stats %v", m.step, m.onHand, m.heldUnits(), m.dirty, l, holds, m.stats)
		}
		m.check(ctx, atRest)
	}
	m.reconciler(ctx)
	m.check(ctx, true)
	took := time.Since(start)
	t.Logf("%d steps in %s: %.0f steps/s; %v", steps, took.Round(time.Millisecond), float64(steps)/took.Seconds(), m.stats)
}

// release is ReleaseStock: it returns the units that went back.
func (m *model) release(ctx context.Context, c *modelCheckout) int64 {
	var n int64
	if err := m.retried(ctx, func() (err error) { n, err = m.s.Release(ctx, m.sku, c.id); return err }); err != nil {
		m.fail("release of %s: %v", c.id, err)
	}
	return n
}

func (m *model) burst(ctx context.Context) {
	if len(m.open) > 12 {
		return
	}
	cs := make([]*modelCheckout, 2+m.rng.IntN(6))
	for i := range cs {
		cs[i] = m.newCheckout()
	}
	open := m.openHolds()
	var wg sync.WaitGroup
	m.concurrent = true
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 0 && !m.dirty {
				// The reconciler runs in the middle of the burst.
				if _, err := m.s.Reconcile(ctx, m.sku, m.onHand, open, nil, 0); err != nil {
					m.mu.Lock()
					m.stats["reconcile error"]++
					m.mu.Unlock()
				}
			}
			res, err := m.s.Reserve(ctx, m.sku, c.id, c.qty)
			m.mu.Lock()
			defer m.mu.Unlock()
			if errors.Is(err, ErrRolledBack) || errors.Is(err, ErrNotStocked) {
				m.stats["burst reserve needs resync"]++
				return // resynced and retried below, one at a time
			}
			m.reserved(c, res, err)
		}()
	}
	wg.Wait()
	m.concurrent = false
	if m.t.Failed() {
		m.t.FailNow()
	}
	m.stats["burst"]++
	for _, c := range cs {
		if c.held {
			continue
		}
		var res ReserveResult
		err := m.retried(ctx, func() (err error) { res, err = m.s.Reserve(ctx, m.sku, c.id, c.qty); return err })
		m.reserved(c, res, err)
	}
}
