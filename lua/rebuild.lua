-- rebuild.lua: restore a SKU's stock after Redis lost it (a restart without persistence,
-- a failover to an empty replica). Postgres is the record: on_hand, and the checkouts that
-- are still open, each of which may hold units.
--
-- KEYS[1] -> stock:{sku}   hash: available, held, max_per_order, gen, node
-- KEYS[2] -> holds:{sku}   hash: checkout id -> quantity held (live holds only)
-- KEYS[3] -> hold-ends:{sku}   hash: holder -> "released:<expiry>" | "committed:<expiry>" | "rebuilt"
-- ARGV[1] -> on_hand, decimal integer 0..1000000000 (read from Postgres under a row lock)
-- ARGV[2] -> max_per_order, decimal integer 1..1000000
-- ARGV[3] -> gen floor: the highest gen of this SKU the caller knows of, decimal integer
-- ARGV[4] -> tombstone TTL in seconds, decimal integer 1..315360000
-- ARGV[5] -> n, how many settled holders follow, decimal integer 0..100000
-- ARGV[6] .. ARGV[5+n] -> settled holders: live holds whose end Postgres already recorded
--   (as in reconcile.lua, "!<checkout>" for a checkout that ended without a sale)
-- ARGV[6+n], ARGV[7+n], ... -> pairs of open checkout id and its quantity of this SKU
-- Returns {code, value, held, gen}, always four integers, never nil or false:
--   {0  OK,              available, held, gen}
--   {11 ALREADY_STOCKED, available, held, gen}   the stock hash exists: nothing changes
--   {10 INVALID_ARGUMENT, index of the bad ARGV, 0, 0}
--
-- Every open checkout without a hold-end tombstone is restored as a hold and marked
-- "rebuilt" in its hold-end key (a superset of the holds that were lost: a checkout still
-- reserving gets one too). A checkout whose release already ran against the empty Redis has
-- a "released" tombstone and gets no hold. reserve.lua turns a "rebuilt" hold back into
-- available units before it judges the reserve, so a checkout that was still reserving is
-- held only if units are really left: the placeholder never lets a reserve through.
-- available = on_hand - held, which is negative while placeholders exceed on_hand (nothing
-- can be held then), so available + held == on_hand stays exact as placeholders end.
-- gen starts above the floor, so callers that saw the lost SKU's gens accept the new one.
-- When only the stock hash was lost, the surviving holds are kept, and settled holders and
-- increases not yet recorded are treated as reconcile.lua treats them.

local args, bad = int_args({{0, 1000000000}, {1, 1000000}, 'gen', {1, 315360000}})
local n
if args then
  n, bad = holds_args(5)
end
if bad then
  return {INVALID_ARGUMENT, bad, 0, 0}
end
local on_hand, max_per_order, floor, ttl = args[1], args[2], args[3], args[4]
local pairs_from = 6 + n

if redis.call('EXISTS', KEYS[1]) == 1 then
  local cur = redis.call('HMGET', KEYS[1], 'available', 'held', 'gen')
  return {ALREADY_STOCKED, tonumber(cur[1]) or 0, tonumber(cur[2]) or 0, tonumber(cur[3]) or 0}
end

for i = 1, n do
  settle(KEYS[2], KEYS[3], ARGV[5 + i], ttl)
end
for i = pairs_from, #ARGV, 2 do
  restore(KEYS[2], KEYS[3], ARGV[i], ARGV[i + 1])
end
keep_ends(KEYS[3])
local held, unbacked = count_held(KEYS[2])
local available = on_hand - (held - unbacked)
local gen = floor + 1
redis.call('HSET', KEYS[1], 'available', available, 'held', held, 'max_per_order', max_per_order, 'gen', gen, 'node', node_id())
return {OK, available, held, gen}
