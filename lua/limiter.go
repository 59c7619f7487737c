package lua

import (
	"context"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/shop"
)

// CoalescedScripts is a Redis client for go-redis/redis_rate's Limiter (the method set its
// NewLimiter asks for) whose script calls go through a Coalescer: the limiter runs its GCRA
// script by EVALSHA for every request it counts, and the calls of concurrent requests share
// round trips. Everything else (the EVAL that loads the script after a NOSCRIPT, SCRIPT
// LOAD and EXISTS, DEL) goes straight to the client. A call whose request ends while it
// waits answers the context's error, which the limiter passes on.
type CoalescedScripts struct {
	ScriptsClient
	coalescer *Coalescer
}

// ScriptsClient is what CoalescedScripts needs of a Redis client (a *redis.Client or a
// *redis.ClusterClient).
type ScriptsClient interface {
	redis.Scripter
	Pipeliner
	Del(ctx context.Context, keys ...string) *redis.IntCmd
}

// NewCoalescedScripts returns rdb with its script calls coalesced.
func NewCoalescedScripts(rdb ScriptsClient) *CoalescedScripts {
	return &CoalescedScripts{ScriptsClient: rdb, coalescer: NewCoalescer(rdb)}
}

// EvalSha runs a loaded script, in a pipeline shared with concurrent calls.
func (s *CoalescedScripts) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.coalesce(ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sha1, keys, args...) })
}

// EvalShaRO runs a loaded read-only script, in a pipeline shared with concurrent calls.
func (s *CoalescedScripts) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.coalesce(ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalShaRO(ctx, sha1, keys, args...) })
}

func (s *CoalescedScripts) coalesce(ctx context.Context, queue func(redis.Pipeliner) *redis.Cmd) *redis.Cmd {
	var cmd *redis.Cmd
	if err := s.coalescer.Do(ctx, func(p redis.Pipeliner) { cmd = queue(p) }); err != nil {
		failed := redis.NewCmd(ctx)
		failed.SetErr(err)
		return failed
	}
	return cmd
}

// RateLimiter counts requests against shop.RateLimits in Redis, with go-redis/redis_rate's
// GCRA script, so every API replica shares the counts: the API's limiter (api.Limiter).
type RateLimiter struct {
	limiter *redis_rate.Limiter
}

// RateClient is what a RateLimiter needs of a Redis client: a *redis.Client, a
// *redis.ClusterClient, or CoalescedScripts over one.
type RateClient interface {
	redis.Scripter
	Del(ctx context.Context, keys ...string) *redis.IntCmd
}

// NewRateLimiter returns a limiter counting in rdb.
func NewRateLimiter(rdb RateClient) *RateLimiter {
	return &RateLimiter{limiter: redis_rate.NewLimiter(rdb)}
}

// Allow counts one request under key against limit.
func (l *RateLimiter) Allow(ctx context.Context, key string, limit shop.RateLimit) (shop.RateAnswer, error) {
	res, err := l.limiter.Allow(ctx, key, redis_rate.Limit{Rate: limit.Rate, Burst: limit.Burst, Period: limit.Period})
	if err != nil {
		return shop.RateAnswer{}, err
	}
	return shop.RateAnswer{Allowed: res.Allowed > 0, RetryAfter: res.RetryAfter}, nil
}
