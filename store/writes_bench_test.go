package store_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// BenchmarkACheckoutsWrites records checkouts, their payments (as the webhook does) and
// their orders, 8 at a time, with the production's cap on open checkouts, and reports the
// CPU every local postgres process spent per checkout (pg-µs/op) beside the time. To compare
// two builds, run it on each, in turn:
//
//	go test -run '^$' -bench ACheckoutsWrites -count 3 ./store/
func BenchmarkACheckoutsWrites(b *testing.B) {
	pool, s := newStore(b)
	s.MaxOpenPerCustomer = store.DefaultMaxOpenPerCustomer
	sku := testenv.RandomID("BENCH-")
	testenv.PutSKU(b, pool, sku, 1_000_000_000, 100, "usd")
	var n atomic.Int64
	checkout := func() error {
		id := fmt.Sprintf("c-%d-%s", n.Add(1), sku)
		rec, err := s.InsertCheckout(b.Context(), shop.CheckoutRecord{CheckoutID: id, CustomerID: "u-" + id, Currency: "usd",
			AmountCents: 100, Items: []shop.Item{{SKU: sku, Quantity: 1, UnitPriceCents: 100}}}, nil)
		if err != nil {
			return err
		}
		order := store.Order{CheckoutID: id, CustomerID: rec.CustomerID, Items: rec.Items,
			AmountCents: rec.AmountCents, Currency: rec.Currency, PaymentProvider: "stripe", PaymentRef: "pi_" + id}
		if _, err := s.RecordPaymentEvent(b.Context(), verifiedEvent(order)); err != nil { // the webhook's write
			return err
		}
		_, _, err = s.ConfirmOrder(b.Context(), order)
		return err
	}
	for range 100 { // past the statement cache's first plans
		if err := checkout(); err != nil {
			b.Fatal(err)
		}
	}
	b.SetParallelism(4) // 8 goroutines on 2 cores
	before := postgresTicks()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := checkout(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(postgresTicks()-before)*1e6/100/float64(b.N), "pg-µs/op")
}

// postgresTicks sums the CPU clock ticks (1/100 s) of every process named postgres.
func postgresTicks() int64 {
	entries, _ := os.ReadDir("/proc")
	var total int64
	for _, e := range entries {
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil || !strings.Contains(string(stat), "(postgres)") {
			continue
		}
		f := strings.Fields(string(stat)[strings.LastIndex(string(stat), ")")+2:])
		user, _ := strconv.ParseInt(f[11], 10, 64)
		system, _ := strconv.ParseInt(f[12], 10, 64)
		total += user + system
	}
	return total
}
