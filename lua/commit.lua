-- commit.lua: turn a checkout's hold into a sale (the order was confirmed).
--
-- KEYS[1] -> stock:{sku}                 hash: available, held, max_per_order, gen, node
-- KEYS[2] -> holds:{sku}                 hash: checkout id -> quantity held (live holds only)
-- KEYS[3] -> hold-ends:{sku}              hash: holder -> "released:<expiry>" | "committed:<expiry>" | "rebuilt"
-- ARGV[1] -> checkout id
-- ARGV[2] -> tombstone TTL in seconds, decimal integer 1..315360000
-- ARGV[3] -> the highest gen the caller has seen of this SKU, decimal integer (0: none)
-- Returns {code, value, available, gen}, always four integers, never nil or false:
--   {0  OK,                quantity committed, available now (unchanged), gen}
--   {6  ALREADY_RELEASED,  0, 0, gen}   refused, the units went back to available
--   {7  ALREADY_COMMITTED, 0, 0, gen}   no-op, a retried commit
--   {8  NO_HOLD,           0, 0, gen}   refused, nothing to commit; nothing written
--   {10 INVALID_ARGUMENT,  index of the bad ARGV, 0, 0}
--   {12 ROLLED_BACK,       gen in redis, gen seen, gen}   nothing changes (see reserve.lua)
--
-- available is untouched: the units left it at reserve time. The order
-- confirmation decrements on_hand in Postgres in the same step, which keeps
-- available + held == on_hand.

local refusal, checkout, ttl, gen, quantity = end_args(KEYS[1], KEYS[2], KEYS[3])
if refusal then
  return refusal
end

if quantity == nil then
  return {NO_HOLD, 0, 0, gen}
end

return drop_hold(KEYS, checkout, quantity, 0, 'committed', ttl, gen)
