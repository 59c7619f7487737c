package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/shop"
)

func TestSpearman(t *testing.T) {
	for _, c := range []struct {
		name string
		x, y []float64
		want float64
	}{
		{"same order", []float64{1, 2, 3, 4}, []float64{10, 20, 30, 40}, 1},
		{"reversed", []float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1},
		// Ranks of y: 1, 2.5, 2.5, 4; Pearson with 1, 2, 3, 4 is 4.5 / sqrt(5 * 4.5).
		{"a tie takes its mean rank", []float64{1, 2, 3, 4}, []float64{5, 7, 7, 9}, 4.5 / math.Sqrt(5*4.5)},
		{"ranks, not values", []float64{1, 2, 3}, []float64{1, 100, 1000}, 1},
	} {
		if got := spearman(c.x, c.y); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: spearman = %v, want %v", c.name, got, c.want)
		}
	}
	if got := spearman([]float64{1}, []float64{1}); !math.IsNaN(got) {
		t.Errorf("one pair: spearman = %v, want NaN", got)
	}
}

// TestDropRanksTellFirstComeFromAShuffle: served first come, first served, the drop's
// figures are far above the 0.2 bound; served in a random order, well within it.
func TestDropRanksTellFirstComeFromAShuffle(t *testing.T) {
	const buyers, units = 500, 100
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	drop := func(place []int) (float64, float64) { // place[i]: buyer i's place in line
		bs := make([]dropBuyer, buyers)
		served, startedAt := map[string]int{}, map[string]time.Time{}
		for i := range bs {
			id := fmt.Sprint("c", i)
			bs[i] = dropBuyer{sent: t0.Add(time.Duration(i) * 5 * time.Millisecond), code: http.StatusConflict}
			if place[i] < units {
				bs[i].code, bs[i].view = http.StatusOK, api.CheckoutView{CheckoutID: id, Status: shop.StatusAwaitingPayment}
				served[id] = i
				startedAt[id] = t0.Add(time.Minute + time.Duration(place[i])*time.Millisecond)
			}
		}
		return dropRanks(bs, served, startedAt)
	}
	fifo := make([]int, buyers)
	for i := range fifo {
		fifo[i] = i
	}
	if all, servedOnly := drop(fifo); all < 0.5 || servedOnly != 1 {
		t.Errorf("first come, first served: rank correlation %.3f over all, %.3f over the served; want > 0.5 and 1", all, servedOnly)
	}
	shuffled := rand.New(rand.NewPCG(1, 2)).Perm(buyers)
	if all, servedOnly := drop(shuffled); math.Abs(all) > 0.2 || math.Abs(servedOnly) > 0.3 {
		t.Errorf("a shuffle: rank correlation %.3f over all, %.3f over the served; want near 0", all, servedOnly)
	}
}
