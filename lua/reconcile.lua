-- reconcile.lua: repair drift between a SKU's Redis counters and Postgres's on_hand.
--
-- KEYS[1] -> stock:{sku}   hash: available, held, max_per_order
-- KEYS[2] -> holds:{sku}   hash: checkout id -> quantity held (live holds only)
-- ARGV[1] -> on_hand, decimal integer 0..1000000000 (read from Postgres under a row lock)
-- Returns {code, value, held}, always three integers, never nil or false:
--   {0  OK,          available before, available after}
--   {1  NOT_STOCKED, 0, 0}   nothing to reconcile (rebuild.lua restores a lost SKU)
--   {10 INVALID_ARGUMENT, 1, 0}
--
-- held is recounted from the live holds, then available = on_hand - held, exactly, as
-- rebuild.lua writes it: negative while rebuild's placeholders exceed on_hand, so that
-- reserve.lua (which gives a placeholder back before judging) still refuses. Clamping at 0
-- would let each placeholder's checkout hold a unit that another checkout holds. The repair
-- can undersell for a moment (a paid order whose hold is not yet committed), never oversell.

local s = ARGV[1]
if type(s) ~= 'string' or #s > 10 or not string.match(s, '^[0-9]+$') or tonumber(s) > 1000000000 then
  return {10, 1, 0}
end
local on_hand = tonumber(s)
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {1, 0, 0}
end
local held = 0
for _, q in ipairs(redis.call('HVALS', KEYS[2])) do
  held = held + (tonumber(q) or 0)
end
local before = tonumber(redis.call('HGET', KEYS[1], 'available')) or 0
local after = on_hand - held
redis.call('HSET', KEYS[1], 'available', after, 'held', held)
return {0, before, after}
