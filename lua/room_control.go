// The waiting room's operator controls: hold the line, set its pace, read its status.

package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Hold stops (held) or resumes the line: while it is held nobody leaves it, not even a cart
// that finds it empty, and new carts still queue. For operators, during a problem.
func (r *Room) Hold(ctx context.Context, held bool) error {
	var err error
	if held {
		err = r.rdb.HSet(ctx, r.key("control"), "held", "1").Err()
	} else {
		err = r.rdb.HDel(ctx, r.key("control"), "held").Err()
	}
	if err != nil {
		return fmt.Errorf("hold the waiting room (%v): %w", held, err)
	}
	return nil
}

// SetPace sets how many carts may leave the line each second, across every replica (0: as
// fast as the replicas start them).
func (r *Room) SetPace(ctx context.Context, cartsPerSecond int64) error {
	var err error
	if cartsPerSecond > 0 {
		err = r.rdb.HSet(ctx, r.key("control"), "pace", cartsPerSecond).Err()
	} else {
		err = r.rdb.HDel(ctx, r.key("control"), "pace").Err()
	}
	if err != nil {
		return fmt.Errorf("set the waiting room's pace to %d: %w", cartsPerSecond, err)
	}
	return nil
}

// Status is the room as operators see it, in one pipelined read.
func (r *Room) Status(ctx context.Context) (shop.RoomStatus, error) {
	pipe := r.rdb.Pipeline()
	waiting := pipe.ZCard(ctx, r.key("line"))
	early := pipe.ZCard(ctx, r.key("early"))
	starting := pipe.ZCard(ctx, r.key("leaving"))
	demand := pipe.HGetAll(ctx, r.key("demand"))
	control := pipe.HMGet(ctx, r.key("control"), "held", "pace")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return shop.RoomStatus{}, fmt.Errorf("read the waiting room's status: %w", err)
	}
	st := shop.RoomStatus{Waiting: waiting.Val(), BeforeSale: early.Val(), Starting: starting.Val(), SpokenFor: map[string]int64{}}
	for sku, n := range demand.Val() {
		st.SpokenFor[sku], _ = strconv.ParseInt(n, 10, 64)
	}
	if v := control.Val(); len(v) == 2 {
		st.Held = v[0] == "1"
		if pace, ok := v[1].(string); ok {
			st.Pace, _ = strconv.ParseInt(pace, 10, 64)
		}
	}
	return st, nil
}
