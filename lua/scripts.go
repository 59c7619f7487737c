package lua

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// script is one embedded .lua file behind common.lua's helpers. Run uses EVALSHA and falls
// back to EVAL when the server answers NOSCRIPT (after a restart or SCRIPT FLUSH).
type script struct {
	name string
	*redis.Script
}

// sources holds every script, NAME.lua, and common.lua, which each script runs behind.
//
//go:embed *.lua
var sources embed.FS

var commonLua = source("common")

// source is the text of NAME.lua; it panics on a name with no file, which only a typo in
// this file can cause (the files are embedded at build time).
func source(name string) string {
	b, err := sources.ReadFile(name + ".lua")
	if err != nil {
		panic("lua: no script " + name + ": " + err.Error())
	}
	return string(b)
}

func newScript(name string) script {
	return script{name, redis.NewScript(commonLua + source(name))}
}

var (
	reserveScript     = newScript("reserve")
	releaseScript     = newScript("release")
	commitScript      = newScript("commit")
	setStockScript    = newScript("set_stock")
	rebuildScript     = newScript("rebuild")
	reconcileScript   = newScript("reconcile")
	forfeitScript     = newScript("forfeit")
	stageChangeScript = newScript("stage_change")
	sweepScript       = newScript("sweep")
)

var allScripts = []script{reserveScript, releaseScript, commitScript, forfeitScript, stageChangeScript,
	setStockScript, rebuildScript, reconcileScript, sweepScript}

// ScriptSource is the full source of the named script ("reserve", ...) as Redis runs it,
// common.lua included, for tools that drive a script themselves (redis-benchmark); "" when
// there is no such script.
func ScriptSource(name string) string {
	for _, sc := range allScripts {
		if sc.name == name {
			return commonLua + source(name)
		}
	}
	return ""
}

// Preload loads every script into the script cache of the server, or of every node of a
// cluster (go-redis' ClusterClient.ScriptLoad), so the first calls run by EVALSHA. The
// product calls it at start; a NOSCRIPT answer later (a failover, a restarted node) calls
// it again.
func (s *Stock) Preload(ctx context.Context) error {
	for _, sc := range allScripts {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("preload %s script: %w", sc.name, err)
		}
	}
	return nil
}

// eval runs sc by EVALSHA, never inside a pipeline: there go-redis cannot fall back from
// NOSCRIPT. NOSCRIPT means a node lost its script cache (a restart, a failover to a replica
// that never loaded the scripts, SCRIPT FLUSH), so every script is loaded again on every
// node (Preload), not only this one, and the call runs again; Run still falls back to EVAL
// should the slot have moved to yet another node meanwhile.
func (s *Stock) eval(ctx context.Context, sc script, keys []string, args ...any) *redis.Cmd {
	cmd := sc.EvalSha(ctx, s.rdb, keys, args...)
	if !errors.Is(cmd.Err(), redis.ErrNoScript) && !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		return cmd
	}
	_ = s.Preload(ctx) // on failure Run falls back to EVAL, and the next NOSCRIPT tries again
	return sc.Run(ctx, s.rdb, keys, args...)
}

// run runs sc and returns its reply, or the error of a reply every script shares (see
// call.shared); the caller maps the rest. Every reply's fourth value is the SKU's
// gen, which this Stock remembers (see gens).
func (s *Stock) run(ctx context.Context, sc script, c call, keys []string, args ...any) (reply, error) {
	vals, err := s.eval(ctx, sc, keys, args...).Int64Slice()
	if err != nil {
		return reply{}, fmt.Errorf("%s: run %s script: %w", c, sc.name, err)
	}
	want := 4
	if sc.name == reconcileScript.name {
		want = 6
	}
	if len(vals) != want {
		return reply{}, fmt.Errorf("%s: %s script returned %d values, want %d", c, sc.name, len(vals), want)
	}
	r := reply{code: vals[0], value: vals[1], extra: vals[2], gen: vals[3], more: vals[4:]}
	if r.code != codeRolledBack && r.code != codeInvalidArgument {
		s.gens.observe(c.sku, r.gen)
	}
	return r, c.shared(r)
}
