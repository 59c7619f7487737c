package workflows_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// update sends a support update at d and reports its answer through the callbacks' results.
type updateResult struct {
	rejected error
	failed   error
	view     shop.View
	done     bool
}

func (f *fixture) updateAt(d time.Duration, name, id string, arg any) *updateResult {
	r := &updateResult{}
	f.env.RegisterDelayedCallback(func() {
		f.env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { r.rejected, r.done = err, true },
			OnComplete: func(v any, err error) {
				r.failed, r.done = err, true
				if view, ok := v.(shop.View); ok {
					r.view = view
				}
			},
		}, arg)
	}, d)
	return r
}

func (f *fixture) status() shop.View {
	f.t.Helper()
	v, err := f.env.QueryWorkflow(workflows.QueryStatus)
	if err != nil {
		f.t.Fatalf("query status: %v", err)
	}
	var view shop.View
	if err := v.Get(&view); err != nil {
		f.t.Fatal(err)
	}
	return view
}

func TestExtendMovesTheDeadlineWithinTheCap(t *testing.T) {
	f, phone, in := phoneCheckout(t, 1)
	in.PaymentTimeoutSeconds = 900
	start := f.env.Now()

	zero := f.updateAt(time.Minute, workflows.UpdateExtend, "x0", workflows.ExtendRequest{Seconds: 0})
	pastCap := f.updateAt(time.Minute, workflows.UpdateExtend, "x1", workflows.ExtendRequest{Seconds: 86_400})
	pastCap2 := f.updateAt(2*time.Minute, workflows.UpdateExtend, "x2", workflows.ExtendRequest{Seconds: 86_400})
	ok := f.updateAt(3*time.Minute, workflows.UpdateExtend, "x3", workflows.ExtendRequest{Seconds: 600})

	v := f.run(in)

	if zero.rejected == nil || !strings.Contains(zero.rejected.Error(), "seconds must be between") {
		t.Errorf("extend by 0: %+v, want rejected by the validator", zero)
	}
	if pastCap.rejected != nil || pastCap.failed != nil {
		t.Errorf("first extension by a day: %+v, want accepted (hold becomes about 1 day 15 min)", pastCap)
	}
	if pastCap2.rejected == nil || !strings.Contains(pastCap2.rejected.Error(), "at most") {
		t.Errorf("second extension by a day: %+v, want rejected past the %s cap", pastCap2, workflows.MaxHold)
	}
	if ok.rejected != nil || ok.view.ExpiresAt == nil {
		t.Fatalf("extend by 600 s: %+v, want accepted with a new expiry", ok)
	}
	if v.Status != shop.StatusExpired {
		t.Fatalf("status %s, want expired at the extended deadline", v.Status)
	}
	if held := f.env.Now().Sub(start); held < 900*time.Second+24*time.Hour+600*time.Second {
		t.Errorf("expired after %s, want after the original 15 min plus both extensions", held)
	}
	if p := f.level(phone); p.Held != 0 {
		t.Errorf("phone: %+v, want nothing held", p)
	}
}

func TestExtendRefusedOnceDecided(t *testing.T) {
	f, _, in := phoneCheckout(t, 1)
	// Cancel and extend in the same instant: the cancel is taken first, the extend refused.
	f.updateAt(time.Minute, workflows.UpdateCancel, "c1", workflows.CancelRequest{By: "support"})
	late := f.updateAt(time.Minute, workflows.UpdateExtend, "x1", workflows.ExtendRequest{Seconds: 60})

	v := f.run(in)

	if v.Status != shop.StatusCancelled || v.Reason == nil || !strings.Contains(*v.Reason, "support") {
		t.Fatalf("status %s reason %v, want cancelled by support", v.Status, v.Reason)
	}
	if late.rejected == nil {
		t.Errorf("extend after cancel: %+v, want rejected", late)
	}
}

// refusedRelease makes every release fail as a refusing Redis would while broken is set,
// and counts the failed attempts.
func refusedRelease(f *fixture) (broken *atomic.Bool, calls *atomic.Int32) {
	broken, calls = &atomic.Bool{}, &atomic.Int32{}
	broken.Store(true)
	f.env.OnActivity(f.acts.ReleaseStock, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in steps.StockInput) (int64, error) {
			if broken.Load() {
				calls.Add(1)
				return 0, errors.New("run release script: dial tcp 127.0.0.1:6379: connect: connection refused")
			}
			return f.acts.ReleaseStock(ctx, in)
		})
	return broken, calls
}

func TestStuckReleaseWaitsForSupportRetry(t *testing.T) {
	f, phone, in := phoneCheckout(t, 2)
	in.PaymentTimeoutSeconds = 60
	broken, calls := refusedRelease(f)
	// Long after the retry budget is spent, support looks: the checkout is flagged and
	// says what is wrong; the retry action without a fix stays stuck, with a fix it ends.
	var flagged shop.View
	f.env.RegisterDelayedCallback(func() { flagged = f.status() }, time.Hour)
	noFix := f.updateAt(time.Hour+time.Minute, workflows.UpdateRetry, "r1", workflows.RetryRequest{})
	f.env.RegisterDelayedCallback(func() { broken.Store(false) }, 2*time.Hour)
	fixed := f.updateAt(2*time.Hour+time.Minute, workflows.UpdateRetry, "r2", workflows.RetryRequest{})

	v := f.run(in)

	if !flagged.NeedsAttention || !strings.Contains(flagged.Attention, "Release 2 x "+phone) || !strings.Contains(flagged.Attention, "connection refused") {
		t.Errorf("while stuck: needs_attention %v, attention %q; want flagged, naming the step and the error", flagged.NeedsAttention, flagged.Attention)
	}
	if noFix.rejected != nil || fixed.rejected != nil {
		t.Errorf("retry updates rejected: %v, %v", noFix.rejected, fixed.rejected)
	}
	if v.Status != shop.StatusExpired || v.NeedsAttention || v.Attention != "" {
		t.Errorf("end: status %s needs_attention %v attention %q; want expired and no longer flagged", v.Status, v.NeedsAttention, v.Attention)
	}
	if p := f.level(phone); p.Held != 0 || p.Available != 10 {
		t.Errorf("phone: %+v, want all 10 available once the release went through", p)
	}
	if calls.Load() < 10 {
		t.Errorf("release ran %d times, want the retry budget spent before flagging", calls.Load())
	}
}

func TestRetryRefusedWhenNothingIsStuck(t *testing.T) {
	f, _, in := phoneCheckout(t, 1)
	in.PaymentTimeoutSeconds = 120
	r := f.updateAt(time.Minute, workflows.UpdateRetry, "r1", workflows.RetryRequest{})

	f.run(in)

	if r.rejected == nil || !strings.Contains(r.rejected.Error(), "no step") {
		t.Errorf("retry with nothing stuck: %+v, want rejected", r)
	}
}

func TestAcknowledgeClearsAFlag(t *testing.T) {
	f, _, in := phoneCheckout(t, 1)
	f.payAt(time.Minute, shop.Payment{Provider: "stripe", EventID: "evt_w", Outcome: shop.PaymentSucceeded, PaymentRef: "pi_w", AmountCents: 1, Currency: "usd"})
	early := f.updateAt(30*time.Second, workflows.UpdateAcknowledge, "a0", workflows.AcknowledgeRequest{})
	var flagged shop.View
	f.env.RegisterDelayedCallback(func() { flagged = f.status() }, 2*time.Minute)
	ack := f.updateAt(3*time.Minute, workflows.UpdateAcknowledge, "a1", workflows.AcknowledgeRequest{})
	f.payAt(4*time.Minute, paid("evt_ok", 99_900))

	v := f.run(in)

	if early.rejected == nil {
		t.Error("acknowledge before anything was flagged was accepted, want rejected")
	}
	if !flagged.NeedsAttention {
		t.Error("a wrong payment did not flag the checkout")
	}
	if ack.rejected != nil || ack.view.NeedsAttention {
		t.Errorf("acknowledge: %+v, want accepted and the flag cleared", ack)
	}
	if v.Status != shop.StatusConfirmed || v.NeedsAttention {
		t.Errorf("end: %s needs_attention %v; want confirmed and not flagged", v.Status, v.NeedsAttention)
	}
}

// A step stuck for days (here a release, through three days of a Redis that refuses) tries
// again less and less often, so the saga's history stays far below the server's limit,
// which would terminate it; once the cause is fixed the saga ends by itself.
func TestAStuckStepTriesLessOftenAsTheOutageGoesOn(t *testing.T) {
	f, phone, in := phoneCheckout(t, 2)
	in.PaymentTimeoutSeconds = 60
	broken, calls := refusedRelease(f)
	const outage = 72 * time.Hour
	f.env.RegisterDelayedCallback(func() { broken.Store(false) }, outage)

	v := f.run(in)

	// Ten attempts a round: at a round every 5 minutes three days are 864 rounds; doubling
	// up to two hours, 41.
	if rounds := calls.Load() / 10; rounds > 50 {
		t.Errorf("the stuck release ran %d rounds in %s, want at most 50", rounds, outage)
	}
	if v.Status != shop.StatusExpired || v.NeedsAttention {
		t.Errorf("end: status %s needs_attention %v; want expired and no longer flagged", v.Status, v.NeedsAttention)
	}
	if p := f.level(phone); p.Held != 0 || p.Available != 10 {
		t.Errorf("phone: %+v, want all 10 available once the release went through", p)
	}
}
