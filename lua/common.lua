-- common.lua: helpers that scripts.go puts in front of every script, so no script repeats them.
--
-- hold-ends:{sku} is the hash of a SKU's hold-end markers: holder -> "released:<expiry>" or
-- "committed:<expiry>" (expiry in Unix seconds of Redis's clock, after which sweep.lua may
-- delete it), or "rebuilt" (a placeholder hold from rebuild.lua or reconcile.lua, no expiry).
-- Its field ":layout" is never deleted, so the hash always exists once the SKU was stocked:
-- in a Redis Cluster a script that declares a missing key gets TRYAGAIN for as long as its
-- slot migrates, while every declared key that exists moves with the slot.

-- The reply codes, the first value of every script's reply, named once for all scripts.
-- errors.go reads them by the same numbers (codeOK, ...); doc.go's table says what each
-- means to each script, and every script's header lists the ones it returns.
local OK, NOT_STOCKED, HOLD_ENDED, ALREADY_HELD, OVER_LIMIT = 0, 1, 2, 3, 4
local OUT_OF_STOCK, ALREADY_RELEASED, ALREADY_COMMITTED, NO_HOLD = 5, 6, 7, 8
local ON_HAND_BELOW_HELD, INVALID_ARGUMENT, ALREADY_STOCKED, ROLLED_BACK = 9, 10, 11, 12

-- node_id names the Redis process running the script: its run_id, new at every start, and
-- its master_replid, new when a replica is promoted. Redis goes back in time only by
-- starting again from an older snapshot or AOF, or by a failover to a lagging replica, and
-- either way the node that serves the SKU then has an id no copy of the data can carry. So
-- the scripts that resync a SKU from Postgres (reconcile, rebuild, set_stock) write it into
-- stock:{sku}.node, and the scripts that move units (start_hold, end_args) refuse with
-- ROLLED_BACK a SKU whose node is not the one they run on: the first of them after a
-- restart or a failover, from whichever process, makes that process resync first.
local function node_id()
  local info = redis.call('INFO', 'server', 'replication')
  return (string.match(info, 'run_id:(%x+)') or '?') .. ':' .. (string.match(info, 'master_replid:(%x+)') or '?')
end

-- other_node reports whether the stock hash was last resynced on another Redis node (see
-- node_id). A missing hash is NOT_STOCKED's business, not this one's.
local function other_node(stock)
  local node = redis.call('HGET', stock, 'node')
  return node ~= node_id() and redis.call('EXISTS', stock) == 1
end

-- check_gen is what every script that moves units checks before it judges: the stock hash's
-- gen is not below seen (the highest the caller has seen), and the SKU was last resynced on
-- this node (see node_id). It returns the ROLLED_BACK reply to refuse with (its extra value
-- seen, or -1 for another node); or nil and the gen.
local function check_gen(stock, seen)
  local gen = tonumber(redis.call('HGET', stock, 'gen')) or 0
  if gen < seen then
    return {ROLLED_BACK, gen, seen, gen}
  end
  if other_node(stock) then
    return {ROLLED_BACK, gen, -1, gen}
  end
  return nil, gen
end

-- int_arg parses a decimal integer argument from min to max, or returns nil.
local function int_arg(s, min, max)
  if type(s) ~= 'string' or #s > 10 or not string.match(s, '^[0-9]+$') then
    return nil
  end
  local n = tonumber(s)
  if n < min or n > max then
    return nil
  end
  return n
end

-- gen_arg parses a gen (a count of changes, up to 15 digits), or returns nil.
local function gen_arg(s)
  if type(s) ~= 'string' or #s > 15 or not string.match(s, '^[0-9]+$') then
    return nil
  end
  return tonumber(s)
end

-- int_args checks the arguments ARGV[first..first+#bounds-1] of a script (first: 1 unless
-- given): bounds[i] is {min, max} for a decimal integer in that range, or 'gen' for a gen.
-- It returns the values in order; or nil and the ARGV index of the first bad one, for the
-- script's INVALID_ARGUMENT reply.
local function int_args(bounds, first)
  first = first or 1
  local values = {}
  for i, b in ipairs(bounds) do
    local arg, v = ARGV[first + i - 1], nil
    if b == 'gen' then
      v = gen_arg(arg)
    else
      v = int_arg(arg, b[1], b[2])
    end
    if v == nil then
      return nil, first + i - 1
    end
    values[i] = v
  end
  return values
end

-- holds_args checks the lists rebuild and reconcile take after their leading arguments:
-- ARGV[at] the count n of settled holders, the n holders, then (holder, quantity) pairs to
-- the end. It returns n; or nil and the index of the bad argument.
local function holds_args(at)
  local n = int_arg(ARGV[at], 0, 100000)
  if n == nil or #ARGV < at + n then
    return nil, at
  end
  local pairs_from = at + 1 + n
  if (#ARGV - pairs_from + 1) % 2 ~= 0 then
    return nil, #ARGV
  end
  for i = pairs_from, #ARGV, 2 do
    if int_arg(ARGV[i + 1], 1, 1000000) == nil then
      return nil, i + 1
    end
  end
  return n
end

-- hold_end returns holder's marker: 'released', 'committed', 'rebuilt' or nil.
local function hold_end(ends, holder)
  local v = redis.call('HGET', ends, holder)
  if not v then
    return nil
  end
  return string.match(v, '^[a-z]+')
end

-- keep_ends makes sure the markers hash exists (see ":layout" above).
local function keep_ends(ends)
  redis.call('HSETNX', ends, ':layout', '2')
end

-- end_hold writes holder's marker how ('released' or 'committed'), kept ttl seconds.
local function end_hold(ends, holder, how, ttl)
  local now = tonumber(redis.call('TIME')[1])
  keep_ends(ends)
  redis.call('HSET', ends, holder, how .. ':' .. (now + ttl))
end

-- holder_args checks the arguments reserve, release, commit and forfeit share: ARGV[1] a
-- holder id, ARGV[2] a decimal integer from 1 to max (quantity or TTL), ARGV[3] the gen the
-- caller has seen. It returns nil, holder, the integer, seen; or the INVALID_ARGUMENT reply.
local function holder_args(max)
  local holder = ARGV[1]
  if type(holder) ~= 'string' or #holder == 0 then
    return {INVALID_ARGUMENT, 1, 0, 0}
  end
  local args, bad = int_args({{1, max}, 'gen'}, 2)
  if bad then
    return {INVALID_ARGUMENT, bad, 0, 0}
  end
  return nil, holder, args[1], args[2]
end

-- end_args checks the arguments of the scripts that end a hold (release, commit, forfeit):
-- ARGV[1] holder, ARGV[2] tombstone TTL, ARGV[3] the gen the caller has seen, the gen of the
-- stock hash against it, the node that last resynced it (see node_id), and the holder's hold-end marker. It returns the reply to refuse
-- with (INVALID_ARGUMENT, ROLLED_BACK, ALREADY_RELEASED, ALREADY_COMMITTED); or nil, the
-- holder, the TTL, the gen and the quantity held (nil: none).
local function end_args(stock, holds, ends)
  local refusal, holder, ttl, seen = holder_args(315360000)
  if refusal then
    return refusal
  end
  local rolled_back, gen = check_gen(stock, seen)
  if rolled_back then
    return rolled_back
  end
  local ended = hold_end(ends, holder)
  if ended == 'released' then
    return {ALREADY_RELEASED, 0, 0, gen}
  elseif ended == 'committed' then
    return {ALREADY_COMMITTED, 0, 0, gen}
  end
  return nil, holder, ttl, gen, tonumber(redis.call('HGET', holds, holder))
end

-- drop_hold ends holder's live hold of quantity units as how ('released' or 'committed'):
-- held drops by quantity, available grows by back (the units given back: all of them for a
-- release, none for a commit or a forfeit), gen is bumped and the marker written. keys are
-- the script's KEYS (stock, holds, hold-ends). The stock hash is only touched if it exists,
-- so a hold outliving it cannot recreate a partial hash with no max_per_order. It returns
-- the OK reply {0, quantity, available after, gen}.
local function drop_hold(keys, holder, quantity, back, how, ttl, gen)
  local available = 0
  if redis.call('EXISTS', keys[1]) == 1 then
    if back > 0 then
      available = redis.call('HINCRBY', keys[1], 'available', back)
    else
      available = tonumber(redis.call('HGET', keys[1], 'available')) or 0
    end
    redis.call('HINCRBY', keys[1], 'held', -quantity)
    gen = redis.call('HINCRBY', keys[1], 'gen', 1)
  end
  redis.call('HDEL', keys[2], holder)
  end_hold(keys[3], holder, how, ttl)
  return {OK, quantity, available, gen}
end

-- release_hold is the body of release.lua and forfeit.lua: it ends the caller's hold as
-- 'released', giving its units back to available when give_back (a release) or not (a
-- forfeit), and returns the script's reply. With no hold it still writes the tombstone: the
-- saga registers its release before its reserve runs, so a release can arrive first (or
-- instead), and the tombstone makes a reserve that arrives later refuse to hold, whether or
-- not the SKU is stocked.
local function release_hold(give_back)
  local refusal, checkout, ttl, gen, quantity = end_args(KEYS[1], KEYS[2], KEYS[3])
  if refusal then
    return refusal
  end
  if quantity == nil then
    end_hold(KEYS[3], checkout, 'released', ttl)
    return {NO_HOLD, 0, 0, gen}
  end
  local back = 0
  if give_back then
    back = quantity
  end
  return drop_hold(KEYS, checkout, quantity, back, 'released', ttl, gen)
end

-- start_hold is what the scripts that take a hold (reserve, stage_change) check first: the
-- SKU is stocked, its gen is not below seen, it was resynced on this node, and holder's hold did not end. It returns the
-- reply to refuse with (NOT_STOCKED, ROLLED_BACK, HOLD_ENDED); or nil, the gen and the
-- holder's marker (nil or 'rebuilt').
local function start_hold(stock, ends, holder, seen)
  if redis.call('EXISTS', stock) == 0 then
    return {NOT_STOCKED, 0, 0, 0}
  end
  local rolled_back, gen = check_gen(stock, seen)
  if rolled_back then
    return rolled_back
  end
  keep_ends(ends)
  local ended = hold_end(ends, holder)
  if ended == 'released' then
    return {HOLD_ENDED, 1, 0, gen}
  elseif ended == 'committed' then
    return {HOLD_ENDED, 2, 0, gen}
  end
  return nil, gen, ended
end

-- settle ends a live hold whose end Postgres already recorded, as its owner will: committed
-- (a confirmed order, a recorded decrease) or released (a recorded increase, "~i...", or a
-- checkout that ended without a sale, passed as "!<checkout>").
local function settle(holds, ends, holder, ttl)
  local how = 'committed'
  if string.sub(holder, 1, 1) == '!' then
    holder, how = string.sub(holder, 2), 'released'
  elseif string.sub(holder, 1, 2) == '~i' then
    how = 'released'
  end
  if redis.call('HDEL', holds, holder) == 1 then
    end_hold(ends, holder, how, ttl)
  end
end

-- restore gives an open checkout that has neither a hold nor a marker a placeholder hold,
-- marked "rebuilt"; it reports whether it did.
local function restore(holds, ends, holder, quantity)
  if not hold_end(ends, holder) and redis.call('HSETNX', holds, holder, quantity) == 1 then
    redis.call('HSET', ends, holder, 'rebuilt')
    return true
  end
  return false
end

-- count_held sums the live holds, and apart the increases not yet recorded ("~i..."), which
-- on_hand does not count yet.
local function count_held(holds)
  local held, unbacked = 0, 0
  local all = redis.call('HGETALL', holds)
  for i = 1, #all, 2 do
    local q = tonumber(all[i + 1]) or 0
    held = held + q
    if string.sub(all[i], 1, 2) == '~i' then
      unbacked = unbacked + q
    end
  end
  return held, unbacked
end
