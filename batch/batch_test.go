package batch_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/batch"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// item is what the tests queue; Send writes the size of the batch that carried it.
type item struct {
	name      string
	batchSize int
}

// held is a Send that waits, once a batch started, for the test to let it through (a send
// on door lets one, closing it lets all) or for the batch's ctx to end, so the test decides
// which items meet in one batch. Each batch is sent on started as it starts.
type held struct {
	door    chan struct{}
	started chan flight
}

type flight struct {
	ctx   context.Context
	items []*item
}

func newRunner(max int) (*batch.Runner[*item], *held) {
	h := &held{door: make(chan struct{}), started: make(chan flight, 100)}
	return &batch.Runner[*item]{Send: h.send, Max: max}, h
}

func (h *held) send(ctx context.Context, items []*item) {
	h.started <- flight{ctx, items}
	select {
	case <-h.door:
	case <-ctx.Done():
		return
	}
	for _, it := range items {
		it.batchSize = len(items)
	}
}

func (h *held) next(t *testing.T) flight {
	t.Helper()
	return testenv.Receive(t, "a batch", h.started)
}

func (h *held) noBatch(t *testing.T) {
	t.Helper()
	select {
	case f := <-h.started:
		t.Errorf("a batch of %d items started, want none", len(f.items))
	default:
	}
}

func names(items []*item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.name)
	}
	return out
}

// do calls Do in the background and returns where its error will arrive.
func do(ctx context.Context, r *batch.Runner[*item], it *item) <-chan error {
	return testenv.Go(func() error { return r.Do(ctx, it) })
}

func returned(t *testing.T, ch <-chan error) error {
	t.Helper()
	return testenv.Receive(t, "Do to return", ch)
}

// queue queues the items one after the other, each once the one before waits, so that
// their order of arrival is the order given.
func queue(t *testing.T, ctx context.Context, r *batch.Runner[*item], items ...*item) []<-chan error {
	t.Helper()
	var out []<-chan error
	for _, it := range items {
		before := r.Waiting()
		out = append(out, do(ctx, r, it))
		testenv.Eventually(t, it.name+" waits", func() bool { return r.Waiting() == before+1 })
	}
	return out
}

func crowd(prefix string, n int) []*item {
	items := make([]*item, n)
	for i := range items {
		items[i] = &item{name: fmt.Sprintf("%s%d", prefix, i)}
	}
	return items
}

// A lone item leaves at once; the items that come while its batch is in flight go together
// in the next one, in order of arrival, and each caller sees what Send left in its item.
func TestRunnerSendsTheItemsThatWaitedInOneBatch(t *testing.T) {
	t.Parallel()
	r, h := newRunner(0)
	ctx := t.Context()
	first := &item{name: "first"}
	firstDone := do(ctx, r, first)
	if f := h.next(t); len(f.items) != 1 {
		t.Errorf("the first batch carries %v, want the first item alone", names(f.items))
	}
	items := crowd("c", 50)
	dones := queue(t, ctx, r, items...)
	close(h.door)
	if err := returned(t, firstDone); err != nil || first.batchSize != 1 {
		t.Errorf("first: %v, batch of %d; want nil, batch of 1", err, first.batchSize)
	}
	for i, ch := range dones {
		if err := returned(t, ch); err != nil || items[i].batchSize != len(items) {
			t.Errorf("%s: %v, batch of %d; want nil, batch of %d", items[i].name, err, items[i].batchSize, len(items))
		}
	}
	if got, want := names(h.next(t).items), names(items); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the second batch carries %v, want %v", got, want)
	}
	h.noBatch(t)
}

// No batch carries more than Max items: a larger crowd takes more batches, first come first.
func TestRunnerSplitsALargeCrowd(t *testing.T) {
	t.Parallel()
	r, h := newRunner(10)
	ctx := t.Context()
	first := do(ctx, r, &item{name: "first"})
	h.next(t)
	items := crowd("c", 27)
	dones := queue(t, ctx, r, items...)
	close(h.door)
	returned(t, first)
	for _, ch := range dones {
		if err := returned(t, ch); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range [][]*item{items[:10], items[10:20], items[20:]} {
		if got := names(h.next(t).items); fmt.Sprint(got) != fmt.Sprint(names(want)) {
			t.Errorf("a batch carries %v, want %v", got, names(want))
		}
	}
	h.noBatch(t)
}

// An item whose ctx has ended is not sent; one whose ctx ends while it waits returns at once
// and is left out of the next batch; one whose ctx ends while its batch is in flight returns
// at once, and the others of that batch get their answers, from a batch not cancelled.
func TestRunnerAnswersACallerThatGaveUpAtOnce(t *testing.T) {
	t.Parallel()
	r, h := newRunner(0)
	ctx := t.Context()

	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.Do(ended, &item{name: "never"}); !errors.Is(err, context.Canceled) {
		t.Errorf("an item whose ctx had ended: %v, want context.Canceled", err)
	}
	h.noBatch(t)

	blocker := do(ctx, r, &item{name: "blocker"})
	h.next(t)
	leaving, leave := context.WithCancel(ctx)
	quitting, quit := context.WithCancel(ctx)
	stays := &item{name: "stays"}
	gone := queue(t, leaving, r, &item{name: "gone"})[0]
	staysDone := queue(t, ctx, r, stays)[0]
	quitted := queue(t, quitting, r, &item{name: "quit"})[0]
	quit()
	if err := returned(t, quitted); !errors.Is(err, context.Canceled) {
		t.Errorf("gave up while waiting: %v, want context.Canceled", err)
	}
	h.door <- struct{}{} // the blocker's batch
	returned(t, blocker)
	next := h.next(t)
	if got := names(next.items); fmt.Sprint(got) != "[gone stays]" {
		t.Errorf("the next batch carries %v, want [gone stays] (not the item that gave up)", got)
	}
	leave()
	if err := returned(t, gone); !errors.Is(err, context.Canceled) {
		t.Errorf("gave up while its batch is in flight: %v, want context.Canceled", err)
	}
	if err := next.ctx.Err(); err != nil {
		t.Errorf("a batch one caller still waits for has its ctx ended: %v", err)
	}
	h.door <- struct{}{}
	if err := returned(t, staysDone); err != nil || stays.batchSize != 2 {
		t.Errorf("the item beside one that gave up: %v, batch of %d; want nil, batch of 2", err, stays.batchSize)
	}
}

// A batch whose callers have all given up is cancelled, unless FinishAbandoned is set.
func TestRunnerCancelsABatchNobodyWaitsFor(t *testing.T) {
	t.Parallel()
	for _, finish := range []bool{false, true} {
		r, h := newRunner(0)
		r.FinishAbandoned = finish
		leaving, leave := context.WithCancel(t.Context())
		done := do(leaving, r, &item{name: "alone"})
		f := h.next(t)
		leave()
		if err := returned(t, done); !errors.Is(err, context.Canceled) {
			t.Errorf("FinishAbandoned %v: gave up while in flight: %v, want context.Canceled", finish, err)
		}
		if finish {
			if err := f.ctx.Err(); err != nil {
				t.Errorf("FinishAbandoned: the batch's ctx ended (%v) when its caller gave up", err)
			}
			close(h.door)
		} else {
			testenv.Eventually(t, "the batch nobody waits for is cancelled", func() bool { return f.ctx.Err() != nil })
		}
	}
}

type traceKey struct{}

// Send's ctx carries the first caller's values, not its deadline.
func TestRunnerSendsWithTheFirstCallersValuesWithoutItsDeadline(t *testing.T) {
	t.Parallel()
	r, h := newRunner(0)
	close(h.door)
	ctx, cancel := context.WithTimeout(context.WithValue(t.Context(), traceKey{}, "first"), time.Minute)
	defer cancel()
	done := do(ctx, r, &item{name: "first"})
	f := h.next(t)
	if v, _ := f.ctx.Value(traceKey{}).(string); v != "first" {
		t.Errorf("Send's ctx carries %q, want the first caller's value", v)
	}
	if _, ok := f.ctx.Deadline(); ok {
		t.Error("Send's ctx has the first caller's deadline")
	}
	returned(t, done)
}
