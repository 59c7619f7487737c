package api

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
)

// slowVersions is a CheckoutRecords whose read of records (with their secret versions) waits
// for release and counts the reads that reached it.
type slowVersions struct {
	CheckoutRecords
	reads   atomic.Int64
	release chan struct{}
}

func (r *slowVersions) RecordedCheckouts(ctx context.Context, ids, _, _ []string) (shop.Recorded, error) {
	r.reads.Add(1)
	select {
	case <-r.release:
		found := shop.Recorded{SecretVersions: map[string]int64{}}
		for _, id := range ids {
			found.SecretVersions[id] = 3
		}
		return found, nil
	case <-ctx.Done():
		return shop.Recorded{}, ctx.Err()
	}
}

func serverOn(records *slowVersions) *Server {
	return &Server{Deps: Deps{Records: records}, recorded: newRecordedCheck(records.RecordedCheckouts)}
}

// A crowd of requests (a buyer's tabs, 2,000 long polls, the waiting room's 202s, a hostile
// client) makes one read of secret versions at a time, not one each: each would take a
// Postgres connection, and the crowd would starve every other request of the pool. The
// first request's read leaves alone; the crowd that came while it ran, on one checkout or
// on many, goes together in the next.
func TestACrowdsSecretVersionsAreReadTogether(t *testing.T) {
	records := &slowVersions{release: make(chan struct{})}
	s := serverOn(records)
	const crowd = 50
	var all sync.WaitGroup
	versions := make(chan int64, 2*crowd)
	for i := range 2 * crowd {
		all.Go(func() {
			cart := "c-1" // half the crowd on one checkout, half on a checkout each
			if i%2 == 1 {
				cart = fmt.Sprint("c-", i)
			}
			a, err := s.readRecord(t.Context(), cart)
			v := a.version()
			if err != nil {
				t.Errorf("secret version: %v", err)
			}
			versions <- v
		})
	}
	// Let the crowd arrive while the first read is held.
	deadline := time.Now().Add(30 * time.Second)
	for records.reads.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	close(records.release)
	all.Wait()
	close(versions)
	for v := range versions {
		if v != 3 {
			t.Errorf("version %d, want 3", v)
		}
	}
	if n := records.reads.Load(); n > 2 {
		t.Errorf("%d reads of secret versions for %d requests at once, want at most 2", n, 2*crowd)
	}
}

// A request that gives up does not fail the others sharing its read.
func TestACancelledRequestDoesNotFailTheSharedSecretRead(t *testing.T) {
	records := &slowVersions{release: make(chan struct{})}
	s := serverOn(records)
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := s.readRecord(ctx, "c-1")
		first <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); records.reads.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() {
		_, err := s.readRecord(t.Context(), "c-1")
		second <- err
	}()
	cancel()
	if err := <-first; err == nil {
		t.Error("the cancelled request got a version")
	}
	close(records.release)
	if err := <-second; err != nil {
		t.Errorf("the request that stayed: %v", err)
	}
}
