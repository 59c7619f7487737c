package lua

import (
	"embed"

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
