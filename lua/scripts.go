package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// script is one embedded .lua file. Run uses EVALSHA and falls back to EVAL
// when the server answers NOSCRIPT (after a restart or SCRIPT FLUSH).
type script struct {
	name string
	*redis.Script
}

//go:embed reserve.lua
var reserveLua string
var reserveScript = script{"reserve", redis.NewScript(reserveLua)}

//go:embed release.lua
var releaseLua string
var releaseScript = script{"release", redis.NewScript(releaseLua)}

//go:embed commit.lua
var commitLua string
var commitScript = script{"commit", redis.NewScript(commitLua)}

//go:embed set_stock.lua
var setStockLua string
var setStockScript = script{"set_stock", redis.NewScript(setStockLua)}

//go:embed rebuild.lua
var rebuildLua string
var rebuildScript = script{"rebuild", redis.NewScript(rebuildLua)}

//go:embed reconcile.lua
var reconcileLua string
var reconcileScript = script{"reconcile", redis.NewScript(reconcileLua)}

//go:embed forfeit.lua
var forfeitLua string
var forfeitScript = script{"forfeit", redis.NewScript(forfeitLua)}

//go:embed stage_change.lua
var stageChangeLua string
var stageChangeScript = script{"stage_change", redis.NewScript(stageChangeLua)}

var allScripts = []script{reserveScript, releaseScript, commitScript, forfeitScript, stageChangeScript,
	setStockScript, rebuildScript, reconcileScript}
