-- stage_change.lua: hold an operator's change of on_hand in Redis while Postgres records it.
--
-- KEYS[1] -> stock:{sku}                 hash: available, held, max_per_order, gen, node
-- KEYS[2] -> holds:{sku}                 hash: checkout id -> quantity held (live holds only)
-- KEYS[3] -> hold-ends:{sku}              hash: holder -> "released:<expiry>" | "committed:<expiry>" | "rebuilt"
-- ARGV[1] -> hold id of the change, "~" followed by the change id, which starts with "i"
--            for an increase and "d" for a decrease
-- ARGV[2] -> delta of on_hand, decimal integer -1000000000..1000000000 (may be 0)
-- ARGV[3] -> max_per_order, decimal integer 1..1000000 (written at once)
-- ARGV[4] -> the highest gen the caller has seen of this SKU, decimal integer (0: none)
-- Returns {code, value, available, gen}, always four integers, never nil or false:
--   {0  OK,               units held for the change, available after, gen}
--   {1  NOT_STOCKED,      0, 0, 0}                  the caller rebuilds from Postgres first
--   {2  HOLD_ENDED,       1 released | 2 committed, 0, gen}
--   {3  ALREADY_HELD,     units held,    available now, gen}   a retried stage
--   {5  OUT_OF_STOCK,     available now, available now, gen}   a decrease beyond the units not held
--   {10 INVALID_ARGUMENT, index of the bad ARGV, 0, 0}
--   {12 ROLLED_BACK,      gen in redis, gen seen, gen}
--
-- The change is staged as a hold, so Redis never runs ahead of Postgres in the direction
-- that oversells, and no Postgres lock is held across a Redis call:
--   decrease by d: d units leave available into the hold now (refused when fewer are
--     available, atomically against reserves). Once Postgres took them from on_hand, the
--     caller commits the hold (commit.lua); if Postgres refused, it releases it.
--   increase by d: the hold counts d units as held that Postgres does not have yet, and
--     available is untouched. Once Postgres added them, the caller releases the hold into
--     available (release.lua); if Postgres refused, it forfeits it (forfeit.lua).
-- Between the two steps available + held == on_hand + d (increase) or == on_hand (decrease);
-- either way nothing can be held that Postgres does not have. A change whose caller died
-- between the steps is finished or undone by the reconciler, from Postgres's record.

local id = ARGV[1]
if type(id) ~= 'string' or #id < 2 or string.sub(id, 1, 1) ~= '~' then
  return {INVALID_ARGUMENT, 1, 0, 0}
end
local s = ARGV[2]
if type(s) ~= 'string' or #s > 11 or not string.match(s, '^-?[0-9]+$') then
  return {INVALID_ARGUMENT, 2, 0, 0}
end
local delta = tonumber(s)
if delta < -1000000000 or delta > 1000000000 then
  return {INVALID_ARGUMENT, 2, 0, 0}
end
local max_per_order = int_arg(ARGV[3], 1, 1000000)
if max_per_order == nil then
  return {INVALID_ARGUMENT, 3, 0, 0}
end
-- reconcile.lua and rebuild.lua read a change's direction from its id.
local dir = string.sub(id, 2, 2)
if delta > 0 and dir ~= 'i' or delta < 0 and dir ~= 'd' then
  return {INVALID_ARGUMENT, 1, 0, 0}
end
local seen = gen_arg(ARGV[4])
if seen == nil then
  return {INVALID_ARGUMENT, 4, 0, 0}
end

local refusal, gen = start_hold(KEYS[1], KEYS[3], id, seen)
if refusal then
  return refusal
end
local available = tonumber(redis.call('HGET', KEYS[1], 'available')) or 0
local already = tonumber(redis.call('HGET', KEYS[2], id))
if already ~= nil then
  return {ALREADY_HELD, already, available, gen}
end
if delta < 0 and available < -delta then
  return {OUT_OF_STOCK, available, available, gen}
end

redis.call('HSET', KEYS[1], 'max_per_order', max_per_order)
local units = math.abs(delta)
if units > 0 then
  if delta < 0 then
    available = redis.call('HINCRBY', KEYS[1], 'available', delta)
  end
  redis.call('HINCRBY', KEYS[1], 'held', units)
  redis.call('HSET', KEYS[2], id, units)
end
gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
return {OK, units, available, gen}
