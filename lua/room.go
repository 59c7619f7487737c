package lua

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Room is the waiting room in Redis: a line of carts in the order they first arrived,
// shared by every API replica. A cart in line holds nothing; the units it asks for count as
// spoken for, so a cart behind that cannot be served from what is left is refused at once.
// Each API replica takes carts from the head when it has room to start a saga (Pop), under a
// lease: if the replica dies before it says how the start went, the cart goes back in line at
// its place, and another replica starts it (starting a cart's saga twice is harmless: one
// workflow id per cart).
//
// Every key carries the room's name as its hash tag: one Cluster slot, one order.
type Room struct {
	rdb     RoomClient
	lookups *Coalescer // concurrent lookups share round trips
	name    string
	lease   time.Duration
	now     func() time.Time
	draw    func() string // a cart's draw for its place in a drop (newDraw; tests fix it)
}

// RoomClient is what the room needs of a Redis client (a *redis.Client or *redis.ClusterClient).
type RoomClient interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Get(ctx context.Context, key string) *redis.StringCmd
	ZCard(ctx context.Context, key string) *redis.IntCmd
	HSet(ctx context.Context, key string, values ...any) *redis.IntCmd
	HDel(ctx context.Context, key string, fields ...string) *redis.IntCmd
	HGet(ctx context.Context, key, field string) *redis.StringCmd
}

// Room defaults.
const (
	// DefaultRoomName names the product's room; tests use their own.
	DefaultRoomName = "checkout"
	// DefaultRoomLease is how long a replica may take to start a cart's saga before another
	// replica takes the cart again: longer than a request's timeout.
	DefaultRoomLease = 30 * time.Second
)

// The room's scripts, each behind room_common.lua (the room's books).
var (
	roomEnterScript   = redis.NewScript(source("room_common") + source("room_enter"))
	roomPopScript     = redis.NewScript(source("room_common") + source("room_pop"))
	roomEndScript     = redis.NewScript(source("room_common") + source("room_end"))
	roomReleaseScript = redis.NewScript(source("room_common") + source("room_release"))
	roomStartScript   = redis.NewScript(source("room_common") + source("room_start"))
)

// NewRoom returns the room called name (DefaultRoomName when empty) on rdb.
func NewRoom(rdb RoomClient, name string) *Room {
	if name == "" {
		name = DefaultRoomName
	}
	return &Room{rdb: rdb, lookups: NewCoalescer(rdb), name: name, lease: DefaultRoomLease, now: time.Now, draw: newDraw}
}

// WithLease returns a copy of the room whose takes last lease (tests shorten it).
func (r *Room) WithLease(lease time.Duration) *Room {
	c := *r
	c.lease = lease
	return &c
}

func (r *Room) key(part string) string { return "room:{" + r.name + "}:" + part }

// roomKeys name the room's keys, in the order room_common.lua reads them (its comment says
// what each holds); the cart's left marker comes last.
var roomKeys = []string{"line", "carts", "demand", "seq", "leaving", "served", "customers", "units", "control", "early",
	"draws", "drop_skus", "starts", "refused", "refusals"}

// keys are every key of the room, for a script about cartID ("" when it is about none).
func (r *Room) keys(cartID string) []string {
	keys := make([]string, 0, len(roomKeys)+1)
	for _, k := range roomKeys {
		keys = append(keys, r.key(k))
	}
	return append(keys, r.leftKey(cartID))
}

func (r *Room) leftKey(cartID string) string { return r.key("left:" + cartID) }

// leftTTL is how long the room remembers that a cart left for its saga: a GET ?wait its
// buyer sent as the cart left answers at once instead of waiting for the checkout's end.
const leftTTL = 10 * time.Second

// Enter asks the room to take the cart. mayPass says the caller can start the saga now: then
// an empty line lets it pass (RoomPass). A cart already in line answers its place; a full line
// answers RoomFull; a customer with perCustomer carts in line and open checkouts already
// (e.Standing; 0: no cap) RoomBusy; one whose carts in line and checkouts would ask for more
// of a SKU than e.MaxPerCustomer allows RoomLimit, naming the SKU; a cart whose units are
// spoken for by the carts ahead RoomShort, with what is left. It counts with the available
// units the caller read (e.Available: the sold-out gate's read of the same POST) and reads
// those of the other SKUs.
func (r *Room) Enter(ctx context.Context, e shop.RoomEntry, mayPass bool, size, perCustomer int64) (shop.RoomAnswer, error) {
	var unread []shop.CartLine // the SKUs whose available units the caller did not read
	for _, it := range e.Items {
		if _, ok := e.Available[it.SKU]; !ok {
			unread = append(unread, it)
		}
	}
	available, err := r.available(ctx, unread)
	if err != nil {
		return shop.RoomAnswer{}, err
	}
	for sku, n := range e.Available {
		available[sku] = n
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return shop.RoomAnswer{}, err
	}
	pass := "0"
	if mayPass {
		pass = "1"
	}
	args := []any{e.CartID, string(raw), pass, size, e.CustomerID, perCustomer, e.StartsAt, r.draw(), e.Standing.Open}
	for _, it := range e.Items {
		args = append(args, it.SKU, it.Quantity, available[it.SKU], e.MaxPerCustomer[it.SKU], e.Standing.Units[it.SKU])
	}
	res, err := r.runReleasing(ctx, roomEnterScript, args...)
	if err != nil {
		return shop.RoomAnswer{}, fmt.Errorf("enter the waiting room, cart %s: %w", e.CartID, err)
	}
	a, err := roomAnswer(res)
	if err != nil {
		return a, fmt.Errorf("waiting room entry of cart %s: %w", e.CartID, err)
	}
	return a, nil
}

// roomAnswer reads room_enter.lua's reply.
func roomAnswer(reply any) (shop.RoomAnswer, error) {
	res, _ := reply.([]any)
	if len(res) == 0 {
		return shop.RoomAnswer{}, fmt.Errorf("reply %v", reply)
	}
	a := shop.RoomAnswer{Outcome: res[0].(string)}
	switch a.Outcome {
	case shop.RoomQueued, shop.RoomEarly:
		a.Position = res[1].(int64)
		return a, json.Unmarshal([]byte(res[2].(string)), &a.Entry)
	case shop.RoomLimit:
		a.SKU = res[1].(string)
	case shop.RoomShort:
		for i := 1; i+2 < len(res); i += 3 {
			a.Shortages = append(a.Shortages, shop.Shortage{SKU: res[i].(string), Requested: res[i+1].(int64), Available: res[i+2].(int64)})
		}
	}
	return a, nil
}

// available reads each SKU's available units (each on its own slot, so not in the room's
// script). A SKU Redis does not know counts as unlimited here: the saga decides.
func (r *Room) available(ctx context.Context, items []shop.CartLine) (map[string]int64, error) {
	if len(items) == 0 {
		return map[string]int64{}, nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(items))
	for i, it := range items {
		cmds[i] = pipe.HMGet(ctx, StockKey(it.SKU), "available")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read stock for the waiting room: %w", err)
	}
	out := make(map[string]int64, len(items))
	for i, it := range items {
		out[it.SKU] = math.MaxInt32
		if vals := cmds[i].Val(); len(vals) == 1 {
			if s, ok := vals[0].(string); ok {
				if n, err := strconv.ParseInt(s, 10, 64); err == nil {
					out[it.SKU] = n
				}
			}
		}
	}
	return out, nil
}

// Pop takes the head of the line under a lease, first putting back in line the carts whose
// lease ran out. It reports false when the line is empty.
func (r *Room) Pop(ctx context.Context) (shop.RoomEntry, bool, error) {
	res, err := r.runReleasing(ctx, roomPopScript, r.now().UnixMilli(), r.lease.Milliseconds(), r.draw())
	if errors.Is(err, redis.Nil) {
		return shop.RoomEntry{}, false, nil
	}
	if err != nil {
		return shop.RoomEntry{}, false, fmt.Errorf("take from the waiting room: %w", err)
	}
	raw, _ := res.(string)
	var e shop.RoomEntry
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		return e, false, fmt.Errorf("waiting room entry %q: %w", raw, err)
	}
	return e, true, nil
}

// Leave forgets a cart taken from the line whose saga has started. answer, if not nil, is
// the saga's answer to the start (JSON), kept a short while for the GET that waited for the
// cart to leave (RoomPlace.Answer), so it needs not ask the saga again.
func (r *Room) Leave(ctx context.Context, cartID string, answer []byte) error {
	_, err := r.run(ctx, cartID, "leave", answer)
	return err
}

// Retry puts a cart taken from the line back at its place: its saga could not start now.
func (r *Room) Retry(ctx context.Context, cartID string) error {
	_, err := r.run(ctx, cartID, "retry", nil)
	return err
}

// Forget takes a cart whose end is recorded (cancelled while it waited) out of the line. A
// cart being started is left to its saga, which adopts the recorded end: gone is false then,
// and when the cart is not in line.
func (r *Room) Forget(ctx context.Context, cartID string) (gone bool, err error) {
	got, err := r.run(ctx, cartID, "forget", nil)
	return got == "ok", err
}

// run runs room_end.lua for the cart; answer is the start's answer, to leave.
func (r *Room) run(ctx context.Context, cartID, how string, answer []byte) (string, error) {
	got, err := roomEndScript.Run(ctx, r.rdb, r.keys(cartID), cartID, how, string(answer), int64(leftTTL.Seconds())).Text()
	if err != nil {
		return "", fmt.Errorf("waiting room %s, cart %s: %w", how, cartID, err)
	}
	return got, nil
}

// Lookup says what the room knows of a cart: in line (with its place), being started, just
// left for its saga, or nothing. It is one pipelined read, shared with the lookups of other carts
// at the same moment (every POST and GET of a checkout looks its cart up).
func (r *Room) Lookup(ctx context.Context, cartID string) (shop.RoomPlace, error) {
	var rank *redis.IntCmd
	var lease, early *redis.FloatCmd
	var entry, left, refusal *redis.StringCmd
	err := r.lookups.Do(ctx, func(pipe redis.Pipeliner) {
		rank = pipe.ZRank(ctx, r.key("line"), cartID)
		lease = pipe.ZScore(ctx, r.key("leaving"), cartID)
		early = pipe.ZScore(ctx, r.key("early"), cartID)
		entry = pipe.HGet(ctx, r.key("carts"), cartID)
		left = pipe.Get(ctx, r.leftKey(cartID))
		refusal = pipe.HGet(ctx, r.key("refusals"), cartID)
	})
	if err == nil {
		err = firstError(rank, lease, early, entry, left, refusal)
	}
	if err != nil {
		return shop.RoomPlace{}, fmt.Errorf("look up cart %s in the waiting room: %w", cartID, err)
	}
	var p shop.RoomPlace
	hasEntry := entry.Err() == nil // a cart in line without its entry: only keys restored by hand
	switch {
	case hasEntry && lease.Err() == nil:
		p.State = shop.PlaceLeaving
	case hasEntry && rank.Err() == nil:
		p.State, p.Position = shop.PlaceQueued, rank.Val()+1
	case hasEntry && early.Err() == nil:
		p.State = shop.PlaceEarly
	case left.Err() == nil:
		p.State = shop.PlaceLeft
		if answer := left.Val(); answer != "1" {
			p.Answer = []byte(answer)
		}
		return p, nil
	case refusal.Err() == nil:
		p.State = shop.PlaceRefused
		if err := json.Unmarshal([]byte(refusal.Val()), &p.Refused); err != nil {
			return shop.RoomPlace{}, fmt.Errorf("waiting room refusal of cart %s: %w", cartID, err)
		}
		return p, nil
	default:
		return p, nil
	}
	p.Entry = &shop.RoomEntry{}
	if err := json.Unmarshal([]byte(entry.Val()), p.Entry); err != nil {
		return shop.RoomPlace{}, fmt.Errorf("waiting room entry of cart %s: %w", cartID, err)
	}
	return p, nil
}

// firstError is the first error of cmds other than redis.Nil (a key that is not there).
func firstError(cmds ...redis.Cmder) error {
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

// Served counts the carts ever taken from the line: the rate the room empties at, which the
// API turns into each cart's estimated wait.
func (r *Room) Served(ctx context.Context) (int64, error) {
	n, err := r.rdb.Get(ctx, r.key("served")).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(n, 10, 64)
}

// Name is the room's name, the hash tag of its keys.
func (r *Room) Name() string { return r.name }
