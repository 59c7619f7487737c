-- set_stock.lua: load a SKU's on-hand count from Postgres into Redis.
--
-- KEYS[1] -> stock:{sku}   hash: available, held, max_per_order, gen, node
-- KEYS[2] -> holds:{sku}   hash: checkout id -> quantity held (live holds only)
-- KEYS[3] -> hold-ends:{sku}   hash of hold-end markers (see common.lua), created here
-- ARGV[1] -> on_hand, decimal integer 0..1000000000
-- ARGV[2] -> max_per_order, decimal integer 1..1000000
-- Returns {code, value, held, gen}, always four integers, never nil or false:
--   {0  OK,                 available, held, gen}
--   {9  ON_HAND_BELOW_HELD, held,      held}   nothing changes
--   {10 INVALID_ARGUMENT,   index of the bad ARGV, 0}
--
-- Live holds survive a reload: available = on_hand - held, so
-- available + held == on_hand holds after every call. The product's operator changes go
-- through stage_change.lua instead (relative, and rebuilt from Postgres first when Redis
-- lost the SKU); this absolute load is for benchmarks and tests.

local args, bad = int_args({{0, 1000000000}, {1, 1000000}})
if bad then
  return {INVALID_ARGUMENT, bad, 0, 0}
end
local on_hand, max_per_order = args[1], args[2]

local held = tonumber(redis.call('HGET', KEYS[1], 'held'))
if held == nil then
  -- No held field (first load, or the stock hash was deleted while holds
  -- lived on): count the live holds so they stay covered by on_hand.
  held = 0
  for _, q in ipairs(redis.call('HVALS', KEYS[2])) do
    held = held + (tonumber(q) or 0)
  end
end

if on_hand < held then
  return {ON_HAND_BELOW_HELD, held, held, 0}
end

local available = on_hand - held
keep_ends(KEYS[3])
redis.call('HSET', KEYS[1], 'available', available, 'held', held, 'max_per_order', max_per_order, 'node', node_id())
local gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
return {OK, available, held, gen}
