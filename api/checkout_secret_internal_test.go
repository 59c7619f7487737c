package api

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowVersions is a CheckoutRecords whose secret-version read waits for release and counts
// the reads that reached it.
type slowVersions struct {
	CheckoutRecords
	reads   atomic.Int64
	release chan struct{}
}

func (r *slowVersions) SecretVersion(ctx context.Context, _ string) (int64, error) {
	r.reads.Add(1)
	select {
	case <-r.release:
		return 3, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// A crowd of requests on one checkout (a buyer's tabs, 2,000 long polls, a hostile client)
// makes one read of its secret version at a time, not one each: each would take a Postgres
// connection, and the crowd would starve every other request of the pool.
func TestConcurrentReadsOfOneSecretVersionAreOne(t *testing.T) {
	records := &slowVersions{release: make(chan struct{})}
	s := &Server{Deps: Deps{Records: records}}
	const crowd = 50
	var all sync.WaitGroup
	versions := make(chan int64, crowd)
	for range crowd {
		all.Go(func() {
			v, err := s.secretVersion(t.Context(), "c-1")
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
	if n := records.reads.Load(); n != 1 {
		t.Errorf("%d reads of one checkout's secret version for %d requests at once, want 1", n, crowd)
	}
}

// A request that gives up does not fail the others sharing its read.
func TestACancelledRequestDoesNotFailTheSharedSecretRead(t *testing.T) {
	records := &slowVersions{release: make(chan struct{})}
	s := &Server{Deps: Deps{Records: records}}
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := s.secretVersion(ctx, "c-1")
		first <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); records.reads.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() {
		_, err := s.secretVersion(t.Context(), "c-1")
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
