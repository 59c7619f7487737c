package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hold-end markers (tombstones): read one (HoldEnd), delete the expired (SweepHoldEnds).

// HoldEnd reads holder's hold-end marker on sku: outcome "released", "committed" or
// "rebuilt", or "" when there is none, and when the sweep may delete it (zero for "rebuilt").
func (s *Stock) HoldEnd(ctx context.Context, sku, holder string) (outcome string, expires time.Time, err error) {
	v, err := s.rdb.HGet(ctx, HoldEndsKey(sku), holder).Result()
	if errors.Is(err, redis.Nil) {
		return "", time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read the hold end of %s on %s: %w", holder, sku, err)
	}
	outcome, at, _ := strings.Cut(v, ":")
	if at == "" {
		return outcome, time.Time{}, nil
	}
	sec, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read the hold end of %s on %s: marker %q: %w", holder, sku, v, err)
	}
	return outcome, time.Unix(sec, 0), nil
}

// sweepBatch is how many markers one sweep script judges: a short script, so Redis keeps
// answering reserves in between.
const sweepBatch = 500

// SweepHoldEnds deletes sku's hold-end markers whose time is up and returns how many it
// deleted. Redis 7.0 has no per-field TTL, so the reconciler calls this for every SKU. It
// reads the markers with HSCAN and lets sweep.lua judge each expired one again on Redis's
// clock, in batches of sweepBatch.
func (s *Stock) SweepHoldEnds(ctx context.Context, sku string) (int64, error) {
	c := call{op: opSweep, sku: sku}
	if err := c.validate(); err != nil {
		return 0, err
	}
	var swept int64
	var batch []any
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		r, err := s.run(ctx, sweepScript, c, []string{HoldEndsKey(sku)}, batch...)
		batch = batch[:0]
		if err == nil && r.code != codeOK {
			err = c.unexpected(r)
		}
		swept += r.value
		return err
	}
	now := time.Now().Unix()
	iter := s.rdb.HScan(ctx, HoldEndsKey(sku), 0, "", sweepBatch).Iterator()
	for iter.Next(ctx) {
		holder := iter.Val()
		if !iter.Next(ctx) {
			break
		}
		_, at, _ := strings.Cut(iter.Val(), ":")
		if sec, err := strconv.ParseInt(at, 10, 64); err != nil || sec > now {
			continue
		}
		if batch = append(batch, holder); len(batch) == sweepBatch {
			if err := flush(); err != nil {
				return swept, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return swept, fmt.Errorf("%s: hscan: %w", c, err)
	}
	return swept, flush()
}
