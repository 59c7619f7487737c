-- reconcile.lua: repair drift between a SKU's Redis counters and Postgres's record.
--
-- KEYS[1] -> stock:{sku}   hash: available, held, max_per_order, gen, node
-- KEYS[2] -> holds:{sku}   hash: checkout id -> quantity held (live holds only)
-- KEYS[3] -> hold-ends:{sku}   hash: holder -> "released:<expiry>" | "committed:<expiry>" | "rebuilt"
-- ARGV[1] -> on_hand, decimal integer 0..1000000000 (read from Postgres under a row lock)
-- ARGV[2] -> gen floor: the highest gen of this SKU the caller knows of, decimal integer
-- ARGV[3] -> tombstone TTL in seconds, decimal integer 1..315360000
-- ARGV[4] -> n, how many settled holders follow, decimal integer 0..100000
-- ARGV[5] .. ARGV[4+n] -> settled holders: live holds whose end Postgres already recorded
--   (a checkout whose order is confirmed, an operator change written to on_hand, or
--   "!<checkout>" for a checkout that ended without a sale: its hold is released)
-- ARGV[5+n], ARGV[6+n], ... -> pairs of open checkout id (in Postgres) and its quantity
-- Returns {code, before, after, gen, restored, rolled back}, always six integers:
--   {0  OK,          available before, available after, gen, holds restored, 1 if gen was below the floor, 2 if the
--                    SKU was last resynced on another node (see node_id in common.lua)}
--   {1  NOT_STOCKED, 0, 0, 0, 0, 0}   nothing to reconcile (rebuild.lua restores a lost SKU)
--   {10 INVALID_ARGUMENT, index of the bad ARGV, 0, 0, 0, 0}
--
-- Every open checkout is taken as holding its quantity, the same superset rebuild.lua uses:
-- one that has neither a hold nor a hold-end tombstone lost its hold (a failover to a lagging
-- replica, a restart from an older snapshot, an AOF everysec crash), or is still reserving;
-- either way it gets a "rebuilt" placeholder, which reserve.lua gives back before judging.
--
-- A settled holder's hold is half ended: Postgres moved on_hand, Redis has not ended the
-- hold yet. It is ended here the way its owner will end it (committed: a confirmed order, a
-- recorded decrease; released: a recorded increase), so the owner's own end is a no-op.
-- Counting it as held instead would take its units from available a second time, for good.
-- An increase not yet recorded ("~i..." and not settled) stays held but is not counted
-- against on_hand, which does not have its units yet.
--
-- Then held is recounted from the holds and available = on_hand - held, exactly: negative
-- while placeholders exceed on_hand, so reserve.lua refuses. Clamping at 0 would let each
-- placeholder's checkout hold a unit another checkout holds.

local args, bad = int_args({{0, 1000000000}, 'gen', {1, 315360000}})
local n
if args then
  n, bad = holds_args(4)
end
if bad then
  return {INVALID_ARGUMENT, bad, 0, 0, 0, 0}
end
local on_hand, floor, ttl = args[1], args[2], args[3]
local pairs_from = 5 + n
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {NOT_STOCKED, 0, 0, 0, 0, 0}
end

local settled = {}
for i = 1, n do
  local holder = ARGV[4 + i]
  settled[holder] = true
  settle(KEYS[2], KEYS[3], holder, ttl)
end

local restored = 0
for i = pairs_from, #ARGV, 2 do
  if restore(KEYS[2], KEYS[3], ARGV[i], ARGV[i + 1]) then
    restored = restored + 1
  end
end
keep_ends(KEYS[3])
local held, unbacked = count_held(KEYS[2])
local cur = redis.call('HMGET', KEYS[1], 'available', 'gen')
local before = tonumber(cur[1]) or 0
local gen = tonumber(cur[2]) or 0
local rolled_back = 0
local node = redis.call('HGET', KEYS[1], 'node')
if gen < floor then
  rolled_back = 1
elseif node and node ~= node_id() then
  rolled_back = 2
end
local after = on_hand - (held - unbacked)
gen = math.max(gen, floor) + 1
redis.call('HSET', KEYS[1], 'available', after, 'held', held, 'gen', gen, 'node', node_id())
return {OK, before, after, gen, restored, rolled_back}
