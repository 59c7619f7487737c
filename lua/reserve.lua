-- reserve.lua: hold units of one SKU for one checkout, at most once.
--
-- KEYS[1] -> stock:{sku}                 hash: available, held, max_per_order, gen, node
-- KEYS[2] -> holds:{sku}                 hash: checkout id -> quantity held (live holds only)
-- KEYS[3] -> hold-ends:{sku}              hash: holder -> "released:<expiry>" | "committed:<expiry>" | "rebuilt"
-- ARGV[1] -> checkout id
-- ARGV[2] -> quantity, decimal integer 1..1000000
-- ARGV[3] -> the highest gen the caller has seen of this SKU, decimal integer (0: none)
-- Returns {code, value, available, gen}, always four integers, never nil or false
-- (go-redis would turn either into redis.Nil):
--   {0  OK,               quantity held,             available after the hold, gen}
--   {1  NOT_STOCKED,      0,                         0, 0}
--   {2  HOLD_ENDED,       1 released | 2 committed,  0, gen}
--   {3  ALREADY_HELD,     quantity already held,     available now, gen}   nothing changes
--   {4  OVER_LIMIT,       max_per_order,             available now, gen}   nothing changes
--   {5  OUT_OF_STOCK,     available now,             available now, gen}   nothing changes
--   {10 INVALID_ARGUMENT, index of the bad ARGV,     0, 0}
--   {12 ROLLED_BACK,      gen in redis,              gen seen, gen}        nothing changes
--
-- gen counts the changes to the SKU. It only grows, so a gen below one the caller has seen
-- means Redis went back in time (a restart from an older snapshot, a failover to a lagging
-- replica) and may have lost holds: nothing is judged until the caller resynced the SKU
-- from Postgres.

local refusal, checkout, quantity, seen = holder_args(1000000)
if refusal then
  return refusal
end

-- A hold-end marker means the saga already compensated (or completed) this
-- checkout; a late or retried reserve must not hold units again.
local gen, ended
refusal, gen, ended = start_hold(KEYS[1], KEYS[3], checkout, seen)
if refusal then
  return refusal
end
local changed = false
if ended == 'rebuilt' then
  -- A placeholder hold from rebuild.lua or reconcile.lua: this checkout may have been still
  -- reserving when Redis lost its data (a checkout that held does not reserve again). Give
  -- the placeholder back and judge the reserve on what is really available.
  local placeholder = tonumber(redis.call('HGET', KEYS[2], checkout))
  if placeholder ~= nil then
    redis.call('HINCRBY', KEYS[1], 'available', placeholder)
    redis.call('HINCRBY', KEYS[1], 'held', -placeholder)
    redis.call('HDEL', KEYS[2], checkout)
  end
  redis.call('HDEL', KEYS[3], checkout)
  changed = true
end
if changed then
  gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
end

local fields = redis.call('HMGET', KEYS[1], 'available', 'max_per_order')
local available = tonumber(fields[1]) or 0

local already = tonumber(redis.call('HGET', KEYS[2], checkout))
if already ~= nil then
  return {ALREADY_HELD, already, available, gen}
end

-- An absent max_per_order means no per-order limit.
local max_per_order = tonumber(fields[2])
if max_per_order ~= nil and quantity > max_per_order then
  return {OVER_LIMIT, max_per_order, available, gen}
end

-- The check and the decrement run in one script, so available never goes
-- below zero however many reserves race.
if available < quantity then
  return {OUT_OF_STOCK, available, available, gen}
end

local after = redis.call('HINCRBY', KEYS[1], 'available', -quantity)
redis.call('HINCRBY', KEYS[1], 'held', quantity)
redis.call('HSET', KEYS[2], checkout, quantity)
gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
return {OK, quantity, after, gen}
