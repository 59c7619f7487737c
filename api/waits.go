package api

import (
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// DefaultMaxWaitsPerAddress and DefaultMaxWaits bound the GETs that wait at once. A buyer's
// page holds one wait per checkout, a household a few: 20 per address leaves room for an
// office. Each wait holds a request goroutine, a connection and, unless it shares one, a
// long poll at Temporal, whose frontend allows 1,200 long polls per namespace and per API
// method (frontend.namespaceCount); 1,000 per process keeps one API replica below that.
const (
	DefaultMaxWaitsPerAddress = 20
	DefaultMaxWaits           = 1000
)

// waitPlaces are the places of the GETs that wait (?wait=N): at most perAddress per client
// address and total in the process. A GET that finds none answers at once.
type waitPlaces struct {
	perAddress, total int
	mu                sync.Mutex
	n                 int
	byAddress         map[string]int
}

func newWaitPlaces(perAddress, total int) *waitPlaces {
	return &waitPlaces{perAddress: perAddress, total: total, byAddress: map[string]int{}}
}

// take takes a place for address ("": none to count, only the process's bound), and reports
// false when either bound is reached. release gives a taken place back.
func (w *waitPlaces) take(address string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n >= w.total || address != "" && w.byAddress[address] >= w.perAddress {
		return false
	}
	w.n++
	if address != "" {
		w.byAddress[address]++
	}
	return true
}

func (w *waitPlaces) release(address string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n--
	if address == "" {
		return
	}
	if w.byAddress[address]--; w.byAddress[address] <= 0 {
		delete(w.byAddress, address)
	}
}

// admitWait is the wait a GET may hold: wait itself with a place taken (release gives it
// back), or 0, no wait, when the caller's address or the process holds as many as it may.
// The address is the one the rate limits count (limitedAddress): a shop backend's waits
// count only against the process, or against the buyer's address it forwards.
func (s *Server) admitWait(c echo.Context, wait time.Duration) (time.Duration, func()) {
	if wait <= 0 {
		return 0, func() {}
	}
	address, _ := s.limitedAddress(c)
	if !s.waits.take(address) {
		return 0, func() {}
	}
	return wait, func() { s.waits.release(address) }
}
