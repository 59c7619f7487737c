-- forfeit.lua: end a checkout's hold WITHOUT giving its units back to available.
--
-- KEYS[1] -> stock:{sku}                 hash: available, held, max_per_order, gen
-- KEYS[2] -> holds:{sku}                 hash: checkout id -> quantity held (live holds only)
-- KEYS[3] -> hold-ends:{sku}              hash: holder -> "released:<expiry>" | "committed:<expiry>" | "rebuilt"
-- ARGV[1] -> checkout id
-- ARGV[2] -> tombstone TTL in seconds, decimal integer 1..315360000
-- ARGV[3] -> the highest gen the caller has seen of this SKU, decimal integer (0: none)
-- Returns {code, value, available, gen}, always four integers, never nil or false:
--   {0  OK,                quantity forfeited, available (unchanged), gen}
--   {6  ALREADY_RELEASED,  0, 0, gen}   no-op, a retried forfeit (or the hold was released)
--   {7  ALREADY_COMMITTED, 0, 0, gen}   refused, the units are sold
--   {8  NO_HOLD,           0, 0, gen}   nothing was held; tombstone written anyway
--   {10 INVALID_ARGUMENT,  index of the bad ARGV, 0, 0}
--   {12 ROLLED_BACK,       gen in redis, gen seen, gen}   nothing changes (see reserve.lua)
--
-- For a hold whose units Postgres no longer has: a paid checkout whose order was refused
-- because on_hand was short (Redis had let one unit be held twice). Releasing it would put
-- a unit back that does not exist and the next buyer would pay for it; forfeiting drops
-- held and leaves available, so available + held comes back to on_hand. The tombstone is
-- "released": to the saga the hold ended without a sale, and a late reserve is refused.

local refusal, checkout, ttl, gen, quantity = end_args(KEYS[1], KEYS[2], KEYS[3])
if refusal then
  return refusal
end

if quantity == nil then
  end_hold(KEYS[3], checkout, 'released', ttl)
  return {8, 0, 0, gen}
end

return drop_hold(KEYS, checkout, quantity, 0, 'released', ttl, gen)
