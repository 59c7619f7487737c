// Package room is the waiting room: the line of carts that wait for their saga, shared by
// every API replica (Line, which lua.Room implements), the bound on the sagas one replica
// starts at once (Bound), and the loop that takes carts from the line's head whenever the
// bound has a place and starts their sagas (Runner).
//
// A flash sale's crowd arrives in one second; the API can start only so many sagas at once.
// A new cart that cannot start now waits in the line, in the order it first arrived, holding
// nothing, and its POST is answered 202 at once with its place. A cart whose units are all
// spoken for by the carts ahead is answered 409 at once; a cart taken from the line always
// starts its saga, and the reserve script answers it: it is the one judge of every hold.
//
// The room only orders carts that have no record yet: the API answers a cart Postgres
// recorded from its saga or from Postgres, whatever Redis holds or lost; the room keeps no
// ends. The package knows the line only through Line and the saga only through the Runner's
// Start, so it links no store: the API imports it, cmd/checkout wires lua.Room into it.
package room

import (
	"context"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Line is the line of carts waiting for their saga (lua.Room).
type Line interface {
	// Enter asks for the cart to pass (mayPass and an empty line), be queued, or be told
	// the room is full or its units are spoken for.
	Enter(ctx context.Context, e shop.RoomEntry, mayPass bool, size, perCustomer int64) (shop.RoomAnswer, error)
	// Pop takes the head of the line under a lease; false when the line is empty.
	Pop(ctx context.Context) (shop.RoomEntry, bool, error)
	// Leave forgets a cart whose saga started; answer (JSON, or nil) is kept a short while
	// for the GET that waited for it (RoomPlace.Answer).
	Leave(ctx context.Context, cartID string, answer []byte) error
	Retry(ctx context.Context, cartID string) error // its saga could not start now
	// Forget takes a cart whose end Postgres recorded out of the line (not one being
	// started: its saga adopts the end).
	Forget(ctx context.Context, cartID string) (gone bool, err error)
	Lookup(ctx context.Context, cartID string) (shop.RoomPlace, error)
	// SetSaleStart tells the line a SKU's sale start (nil: on sale), as an operator set it:
	// a cart in line for a SKU whose start is ahead is not taken before it, and the carts
	// waiting for the SKU's sale wait for the new start (none, when it is cleared).
	SetSaleStart(ctx context.Context, sku string, startsAt *time.Time) error
	// Hold, SetPace and Status are the operators' controls.
	Hold(ctx context.Context, held bool) error
	SetPace(ctx context.Context, cartsPerSecond int64) error
	Status(ctx context.Context) (shop.RoomStatus, error)
	Served(ctx context.Context) (int64, error) // carts ever taken from the line
}

// Config is the room's part of the API's configuration.
type Config struct {
	// Size is how many carts may wait in the line (WAITING_ROOM_SIZE); past it a POST is
	// 503 waiting_room_full. DefaultSize when 0.
	Size int64
	// PerCustomer is how many carts one customer may have in the line at once; one more is
	// 429 too_many_open_checkouts. DefaultPerCustomer when 0, none when < 0.
	PerCustomer int64
	// MaxStarting caps the sagas this replica starts at once (MAX_STARTING_CHECKOUTS);
	// below it the bound follows their latency against Target (Bound).
	// DefaultMaxStarting when 0.
	MaxStarting int64
	// Target is the start latency the bound aims under (ADMISSION_TARGET_MS).
	// DefaultTarget when 0.
	Target time.Duration
}

// DefaultPerCustomer is how many carts one customer may have in the line at once, as many
// as open checkouts (MAX_OPEN_CHECKOUTS_PER_CUSTOMER's default).
const DefaultPerCustomer = 5

// DefaultSize holds a 70,000-buyer drop with room to spare: a waiting cart costs Redis about
// 300 bytes.
const DefaultSize = 100_000

// WithDefaults fills the settings left zero.
func (c Config) WithDefaults() Config {
	if c.Size <= 0 {
		c.Size = DefaultSize
	}
	switch {
	case c.PerCustomer == 0:
		c.PerCustomer = DefaultPerCustomer
	case c.PerCustomer < 0:
		c.PerCustomer = 0 // no cap
	}
	if c.MaxStarting <= 0 {
		c.MaxStarting = DefaultMaxStarting
	}
	if c.Target <= 0 {
		c.Target = DefaultTarget
	}
	return c
}
