package lua

import (
	"context"

	"github.com/redis/go-redis/v9"
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
