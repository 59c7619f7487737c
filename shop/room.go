package shop

// The waiting room: carts that cannot start their saga yet wait in line, in the order they
// first arrived, across every API replica, and hold nothing (see lua.Room and the contract's
// 202 answer).

// RoomEntry is one cart waiting in the room: everything needed to start its saga later, on
// any API replica.
type RoomEntry struct {
	CartID         string     `json:"cart_id"`
	CustomerID     string     `json:"customer_id"`
	Items          []CartLine `json:"items"`
	TimeoutSeconds int64      `json:"timeout_seconds"`
	IdempotencyKey string     `json:"idempotency_key"`
	RequestHash    string     `json:"request_hash"`
	Caller         string     `json:"caller,omitempty"`
	// StartsAt is when the cart's sale starts (unix ms: the latest sale_starts_at of its
	// SKUs; 0: on sale). A cart that comes before waits for it (Early).
	StartsAt int64 `json:"starts_at,omitempty"`
	// Early is set while the cart waits for its sale: it holds nothing, speaks for no units,
	// and gets its place in line at the start, by a random draw.
	Early bool `json:"early,omitempty"`
	// MaxPerCustomer is each SKU's max_per_customer (absent: none), for the door: a customer's
	// carts in line speak for at most that many units. Not kept in line.
	MaxPerCustomer map[string]int64 `json:"-"`
	// Available is each SKU's available units as the API just read them (the sold-out
	// gate's read), for the door's count; the room reads those missing. Not kept in line.
	Available map[string]int64 `json:"-"`
	// Standing is the customer's open checkouts and units as Postgres recorded them, for the
	// door: the customer's carts in line count on top of it. Not kept in line.
	Standing Standing `json:"-"`
	// Ticket is the cart's place in the order of arrival (the room sets it).
	Ticket int64 `json:"ticket,omitempty"`
	// Taken counts the times the cart was taken from the line (the room sets it): after the
	// first, its saga may already exist.
	Taken int `json:"taken,omitempty"`
}

// Standing is what Postgres holds of a customer when their new cart comes to the door: their
// open checkouts, and the units of each SKU with a max_per_customer that their open and
// confirmed checkouts hold or bought. The door counts the customer's carts in line on top of
// it, as the saga's record would count them (their limits).
type Standing struct {
	Open  int64
	Units map[string]int64
}

// Recorded is what Postgres holds of the carts and customers the door asks about, read in one
// round trip (a crowd's POSTs together).
type Recorded struct {
	// Creators are the carts Postgres recorded, each with the fingerprint of the request
	// that created it.
	Creators map[string]Fingerprint
	// Ended are the recorded carts that ended (absent: open, or not recorded).
	Ended map[string]bool
	// Standings are the customers' standings (absent: no open checkout, no units).
	Standings map[string]Standing
	// SecretVersions are the versions of the carts' secrets that support revoked (absent:
	// 0), recorded or not: a cart in line has a secret too.
	SecretVersions map[string]int64
}

// Creator is the fingerprint of the request that put the cart in line.
func (e RoomEntry) Creator() Fingerprint {
	return Fingerprint{RequestHash: e.RequestHash, IdempotencyKey: e.IdempotencyKey, Caller: e.Caller}
}

// Room outcomes for a cart that asks to enter (Room.Enter).
const (
	RoomPass   = "pass"   // the line is empty and the caller may start the saga at once
	RoomQueued = "queued" // in line (now or already), with a position
	RoomFull   = "full"   // the line is at its size: 503
	RoomShort  = "short"  // the units still free are spoken for by the carts ahead: 409
	RoomBusy   = "busy"   // the customer has the most carts allowed in line already: 429
	RoomLimit  = "limit"  // the customer's carts in line would pass a SKU's max_per_customer: 409
	RoomEarly  = "early"  // the cart's sale has not started: it waits for it (202 waiting_for_sale)
)

// RoomAnswer is what the room said to a cart that asked to enter.
type RoomAnswer struct {
	Outcome   string
	Position  int64     // 1 for the head of the line; with RoomQueued
	Entry     RoomEntry // the entry in line (a retry compares its RequestHash); with RoomQueued
	Shortages []Shortage
	SKU       string // the SKU whose max_per_customer a RoomLimit cart would pass
}

// PlaceState is where the room has a cart: one state of RoomPlace.
type PlaceState int

const (
	PlaceNone    PlaceState = iota // the room does not know the cart: its saga or Postgres answers
	PlaceQueued                    // waiting in line, at its Position
	PlaceEarly                     // waiting for its sale to start, not in line yet
	PlaceLeaving                   // taken from the line, its saga being started
	PlaceLeft                      // left the line for its saga a moment ago
	PlaceRefused                   // waited for its sale and found its units spoken for at the start
)

// RoomPlace is what the room knows of one cart (Room.Lookup).
type RoomPlace struct {
	State    PlaceState
	Position int64      // with PlaceQueued: 1 for the head of the line
	Entry    *RoomEntry // with PlaceQueued, PlaceEarly and PlaceLeaving: never nil then
	// Answer is the saga's answer to the start of a cart in PlaceLeft (JSON), kept as long
	// as the state for the GET that waited for the cart to leave; nil when none was kept.
	Answer []byte
	// Refused lists the shortages of a cart in PlaceRefused: it left the room without a
	// saga (kept a while, RefusalTTL).
	Refused []Shortage
}

// InLine reports whether the cart waits in line, for its sale, or is being started from the
// line: a cart the room speaks for, until its saga answers.
func (p RoomPlace) InLine() bool { return p.Waiting() || p.State == PlaceLeaving }

// Waiting reports whether the cart waits in line or for its sale: a cancel ends it in the
// room, and no saga of it is started yet.
func (p RoomPlace) Waiting() bool { return p.State == PlaceQueued || p.State == PlaceEarly }

// RoomStatus is the waiting room as operators see it.
type RoomStatus struct {
	Waiting    int64            `json:"waiting"`     // carts in line
	BeforeSale int64            `json:"before_sale"` // carts waiting for their sale to start
	Starting   int64            `json:"starting"`    // carts taken, their sagas being started
	SpokenFor  map[string]int64 `json:"spoken_for"`  // units the carts in line ask for, per SKU
	Held       bool             `json:"held"`        // nobody leaves the line
	Pace       int64            `json:"pace"`        // carts started a second at most; 0: no pace
}
