package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// script is one embedded .lua file behind common.lua's helpers. Run uses EVALSHA and falls
// back to EVAL when the server answers NOSCRIPT (after a restart or SCRIPT FLUSH).
type script struct {
	name string
	*redis.Script
}

//go:embed common.lua
var commonLua string

func newScript(name, src string) script { return script{name, redis.NewScript(commonLua + src)} }

//go:embed reserve.lua
var reserveLua string
var reserveScript = newScript("reserve", reserveLua)

//go:embed release.lua
var releaseLua string
var releaseScript = newScript("release", releaseLua)

//go:embed commit.lua
var commitLua string
var commitScript = newScript("commit", commitLua)

//go:embed set_stock.lua
var setStockLua string
var setStockScript = newScript("set_stock", setStockLua)

//go:embed rebuild.lua
var rebuildLua string
var rebuildScript = newScript("rebuild", rebuildLua)

//go:embed reconcile.lua
var reconcileLua string
var reconcileScript = newScript("reconcile", reconcileLua)

//go:embed forfeit.lua
var forfeitLua string
var forfeitScript = newScript("forfeit", forfeitLua)

//go:embed stage_change.lua
var stageChangeLua string
var stageChangeScript = newScript("stage_change", stageChangeLua)

//go:embed sweep.lua
var sweepLua string
var sweepScript = newScript("sweep", sweepLua)

var scriptSources = map[string]string{
	"reserve":      reserveLua,
	"release":      releaseLua,
	"commit":       commitLua,
	"set_stock":    setStockLua,
	"rebuild":      rebuildLua,
	"reconcile":    reconcileLua,
	"forfeit":      forfeitLua,
	"stage_change": stageChangeLua,
	"sweep":        sweepLua,
}

var allScripts = []script{reserveScript, releaseScript, commitScript, forfeitScript, stageChangeScript,
	setStockScript, rebuildScript, reconcileScript, sweepScript}

// ScriptSource is the full source of the named script ("reserve", ...) as Redis runs it,
// common.lua included, for tools that drive a script themselves (redis-benchmark); "" when
// there is no such script.
func ScriptSource(name string) string {
	src, ok := scriptSources[name]
	if !ok {
		return ""
	}
	return commonLua + src
}
