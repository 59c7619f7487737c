// The waiting room's scheduled drops: carts that come before a SKU's sale starts wait for
// it (room_enter.lua), and at the start they take their places in line by random draws
// (room_release.lua), ahead of every cart that comes after.

package lua

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/shop"
)

// RefusalTTL is how long the refusal of a cart that waited for a sale and found its units
// spoken for at the start is kept for its buyer's GET.
const RefusalTTL = 10 * time.Minute

// maxReleases bounds the drops one call releases before it gives up (each is released once,
// by whichever call meets it first).
const maxReleases = 8

// runReleasing runs room_enter.lua or room_pop.lua. Either answers {"due", start} when a
// drop's start has come and its early carts are not in line yet: then it releases the drop
// (release) and runs the script again.
func (r *Room) runReleasing(ctx context.Context, script *redis.Script, args ...any) (any, error) {
	for range maxReleases {
		res, err := script.Run(ctx, r.rdb, r.keys(""), args...).Result()
		due, ok := res.([]any)
		if err != nil || !ok || due[0] != "due" {
			return res, err
		}
		if err := r.release(ctx, due[1].(string)); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("drops still due after %d releases", maxReleases)
}

// newDraw is a cart's random draw for its place in a drop: 16 hex digits from the system's
// cryptographic source, so no client can predict or repeat a place.
func newDraw() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// release puts the early carts of the drop that starts at start (ms, as the room's scripts
// name it) in line, by their draws, judging each against the SKUs' available units.
func (r *Room) release(ctx context.Context, start string) error {
	listed, err := r.rdb.HGet(ctx, r.key("drop_skus"), start).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read the SKUs of the drop at %s: %w", start, err)
	}
	var lines []shop.CartLine
	for _, sku := range strings.Fields(listed) {
		lines = append(lines, shop.CartLine{SKU: sku})
	}
	available, err := r.available(ctx, lines)
	if err != nil {
		return err
	}
	args := []any{start, RefusalTTL.Milliseconds()}
	for sku, n := range available {
		args = append(args, sku, n)
	}
	if err := roomReleaseScript.Run(ctx, r.rdb, r.keys(""), args...).Err(); err != nil {
		return fmt.Errorf("release the drop at %s: %w", start, err)
	}
	return nil
}

// SetSaleStart tells the room a SKU's sale start (nil: on sale), as an operator set it.
// A cart in line with a SKU whose start is ahead, on Redis's clock, is not taken: it goes
// back to wait for the start with the carts that came before it, and is placed by a draw
// (room_pop.lua), so no cart sells before its SKUs' start. The carts waiting for a sale of
// the SKU wait for its new start: at once, when it is cleared or moved into the past
// (room_start.lua).
func (r *Room) SetSaleStart(ctx context.Context, sku string, startsAt *time.Time) error {
	var ms int64
	if startsAt != nil {
		ms = startsAt.UnixMilli()
	}
	if err := roomStartScript.Run(ctx, r.rdb, r.keys(""), sku, ms).Err(); err != nil {
		return fmt.Errorf("set the sale start of %s in the waiting room: %w", sku, err)
	}
	return nil
}
