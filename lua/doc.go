// Package lua keeps stock holds for the checkout saga in Redis, one atomic
// Lua script per state change, so that concurrent checkouts can never hold
// more units than exist.
//
// # Invariant
//
// For every SKU, at every moment between two scripts:
//
//	available + held == on_hand
//
// on_hand lives in Postgres and is the source of truth for what is in the
// warehouse; Redis keeps the two halves the saga moves units between.
// Reserve moves units from available to held, Release moves them back, and
// Commit removes them from held when the order is confirmed, at which point
// the order confirmation decrements on_hand in Postgres by the same amount.
// available never goes below zero: the check and the decrement run inside
// one script.
//
// # Keys
//
// Every key carries the SKU as a {sku} hash tag, so the keys one script
// touches share a Redis Cluster slot. Keys are built only by [StockKey],
// [HoldsKey] and [HoldEndsKey] and reach the scripts through KEYS; no script
// builds a key name. Every script declares the same keys of its SKU, and only those.
//
//	stock:{SKU}       hash: available, held, max_per_order, gen (decimal integers),
//	                  node (the Redis node it was last resynced on).
//	                  Absent means the SKU was never stocked (or Redis lost it).
//	                  Written by set_stock.lua and rebuild.lua (all
//	                  fields), stage_change.lua (max_per_order too),
//	                  reserve.lua, release.lua, commit.lua, forfeit.lua
//	                  and reconcile.lua (available, held and gen); node by
//	                  set_stock.lua, rebuild.lua and reconcile.lua only.
//	                  gen counts changes and only grows: see "Redis going
//	                  back in time" below.
//	holds:{SKU}       hash: holder id -> quantity held, live holds only. A holder
//	                  is a checkout, or "~<change id>" for an operator's change
//	                  of on_hand in flight (stage_change.lua).
//	                  Field added by reserve.lua and stage_change.lua (and
//	                  rebuild.lua and reconcile.lua, from Postgres's open
//	                  checkouts), removed by release.lua, commit.lua and
//	                  forfeit.lua.
//	hold-ends:{SKU}   hash: holder id -> hold-end marker (tombstone): "released:<expiry>"
//	                  or "committed:<expiry>" (Unix seconds on Redis's clock), or
//	                  "rebuilt" (no expiry) on a placeholder hold written by
//	                  rebuild.lua or reconcile.lua, which reserve.lua gives back
//	                  before it judges that checkout's reserve. Written by
//	                  release.lua, commit.lua and forfeit.lua (expiry
//	                  [DefaultTombstoneTTL] unless [Stock.WithTombstoneTTL] says
//	                  otherwise); read by every hold script. Its field ":layout" is
//	                  never deleted (see "Redis Cluster"). Redis 7.0 has no
//	                  per-field TTL: [Stock.SweepHoldEnds] (sweep.lua), run by the
//	                  reconciler, deletes the markers past their expiry.
//
// The hold-end tombstone is what makes retries safe in any order. Temporal
// retries activities, and the saga registers the release before the reserve
// runs, so a release can arrive before its reserve, or a reserve can be
// retried after the checkout was compensated. A release with no hold still
// writes the "released" tombstone, and a reserve that finds a tombstone
// refuses with [ErrHoldEnded] instead of holding units nobody will release.
// The expiry bounds how long a late retry is recognised; it must exceed the
// longest time an activity can be retried.
//
// # Redis Cluster
//
// While a slot migrates (a reshard), a script whose declared keys are partly missing on the
// source master gets TRYAGAIN, and so does every script on the target that does not find all
// of them. So every key a script declares exists whenever the SKU is stocked: stock:{SKU}
// by definition, hold-ends:{SKU} through its ":layout" field (set_stock.lua, rebuild.lua,
// reconcile.lua, stage_change.lua and reserve.lua create it), and holds:{SKU} while the SKU
// has a live hold, which a hot SKU does. Each key then moves with the slot and the scripts
// run on the source until the keys move and on the target after (ASK); the first layout, a
// tombstone key per checkout that usually did not exist, failed every script of the SKU
// until the migration ended. A SKU with no live hold at all can still see TRYAGAIN (go-redis
// retries it) in the moment between its stock key and the others moving.
//
// Upgrading from that layout: the scripts no longer read hold-end:{SKU}:<checkout> keys,
// which expire on their own TTL. Redis is a cache of Postgres, so the upgrade drains first:
// stop the API, let the running sagas finish or wait on payment (no reserve in flight), then
// start the new workers. A saga whose hold ended under the old layout and that reserves
// again is the one case the old tombstones would have caught, and a drained saga does not
// reserve again. The first reconcile (or set stock) adds ":layout" to SKUs stocked before.
//
// # Return codes
//
// Each script returns an array of integers {code, value, extra, gen} and
// never nil or false (go-redis would turn either into redis.Nil). The codes
// are numbered and named once for all scripts, in common.lua, and the scripts
// reply by those names (errors.go reads the same numbers); each Go wrapper maps its own script's codes as the
// script's header lists them (Stock.Reserve, releaseCodes, commitCodes, ...), and only
// ROLLED_BACK and INVALID_ARGUMENT, which mean the same from every script, are mapped in
// one place (call.shared in errors.go):
//
//	code  name                reserve               release, forfeit      commit              set_stock / stage_change
//	0     OK                  held                  units returned/ended  units sold          loaded / staged
//	1     NOT_STOCKED         ErrNotStocked         -                     -                   - / ErrNotStocked
//	2     HOLD_ENDED          ErrHoldEnded          -                     -                   - / ErrHoldEnded
//	3     ALREADY_HELD        success, no change    -                     -                   - / success, no change
//	4     OVER_LIMIT          ErrOverLimit          -                     -                   -
//	5     OUT_OF_STOCK        ErrOutOfStock         -                     -                   - / shop.ErrInsufficientStock
//	6     ALREADY_RELEASED    -                     success, no-op        ErrHoldReleased     -
//	7     ALREADY_COMMITTED   -                     ErrHoldCommitted      success, no-op      -
//	8     NO_HOLD             -                     success, tombstone    ErrNoHold           -
//	9     ON_HAND_BELOW_HELD  -                     -                     -                   shop.ErrOnHandBelowHeld / -
//	10    INVALID_ARGUMENT    ErrInvalidArgument    ErrInvalidArgument    ErrInvalidArgument  ErrInvalidArgument
//	11    ALREADY_STOCKED     (rebuild.lua only: the SKU is in Redis; nothing changes)
//	12    ROLLED_BACK         ErrRolledBack         ErrRolledBack         ErrRolledBack       - / ErrRolledBack
//
// Every reply's fourth value is the SKU's gen (reconcile.lua adds two more: holds restored,
// and whether gen was below the caller's floor, 2 when the SKU was last resynced on another
// node).
//
// # Redis going back in time
//
// A failover to a lagging replica, a restart from an older snapshot or an AOF everysec
// crash loses the last writes: live holds vanish, and their units look available. Every
// script that changes a SKU bumps its gen, and [Stock] remembers the highest gen it saw of
// each SKU; the hold scripts (reserve, release, commit, forfeit, stage_change) take that
// number and refuse with [ErrRolledBack] when Redis shows a lower one, before any unit
// moves. The caller (package activities) then reconciles the SKU from Postgres, which
// restores every open checkout's hold, and tries again.
//
// The gen only catches a rollback that the caller saw past: a process that started after
// it, or another worker that never saw the lost writes, would pass the check, and its write
// would lift gen back over the rollback for everyone. So the scripts also check who Redis
// is: every resync (set_stock, rebuild, reconcile) writes into stock:{SKU}.node the id of
// the node that ran it (its run_id, new at each start, and master_replid, new at each
// promotion), and the hold scripts refuse with [ErrRolledBack] a SKU whose node is not the
// one they run on. A restart from any snapshot and a failover to any replica change that
// id, and no copy of the data can hold the new one, so the first script after either, from
// any process, resyncs the SKU from Postgres before a unit moves. A restart that lost
// nothing costs one resync per SKU. Operators restoring keys by hand (RESTORE, a copied
// dump on a running node) are not covered by this: only the gens are.
//
// rebuild.lua and reconcile.lua are the recovery paths. When Redis loses a SKU
// (a restart without persistence), reserve answers NOT_STOCKED for a SKU that
// Postgres knows; the caller then rebuilds it from Postgres (on_hand, and every
// open checkout as a hold) before any new hold is taken. reconcile.lua repairs
// drift: every open checkout without a hold or tombstone gets a placeholder hold (the same
// superset rebuild uses), held is recounted from the holds, available = on_hand - held
// (negative while placeholders exceed on_hand, never clamped).
// Both run under the SKU's Postgres row lock, so on_hand stands still. A hold whose end
// Postgres already wrote (a confirmed order before its commit, a written operator change
// before its Redis step) is "settled": both scripts end it as its owner will, since its
// units are no longer where on_hand counts them, and an increase not yet written is held
// without being counted against on_hand. Counting either as an ordinary hold left a unit
// short for good once the hold's end ran.
// Both can only undersell for a moment (placeholders of checkouts still reserving), never
// oversell.
//
// The Go wrappers validate every argument before any Redis call, so code 10
// only appears if a script is called some other way; the scripts check
// anyway rather than crash on a bad ARGV.
//
// Refusals ("no") are typed errors wrapping one of the sentinels, for
// errors.Is and errors.As; Redis and network failures ("broken") are wrapped
// with %w and match none of the sentinels, so callers can retry them.
package lua
