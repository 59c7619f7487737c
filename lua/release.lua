-- release.lua: give a checkout's held units back to available (saga compensation).
--
-- KEYS[1] -> stock:{sku}                 hash: available, held, max_per_order, gen
-- KEYS[2] -> holds:{sku}                 hash: checkout id -> quantity held (live holds only)
-- KEYS[3] -> hold-ends:{sku}              hash: holder -> "released:<expiry>" | "committed:<expiry>" | "rebuilt"
-- ARGV[1] -> checkout id
-- ARGV[2] -> tombstone TTL in seconds, decimal integer 1..315360000
-- ARGV[3] -> the highest gen the caller has seen of this SKU, decimal integer (0: none)
-- Returns {code, value, available, gen}, always four integers, never nil or false:
--   {0  OK,                quantity released, available after, gen}
--   {6  ALREADY_RELEASED,  0,                 0, gen}   no-op, a retried release
--   {7  ALREADY_COMMITTED, 0,                 0, gen}   refused, the units are sold
--   {8  NO_HOLD,           0,                 0, gen}   nothing was held; tombstone written anyway
--   {10 INVALID_ARGUMENT,  index of the bad ARGV, 0, 0}
--   {12 ROLLED_BACK,       gen in redis, gen seen, gen}   nothing changes (see reserve.lua)
--
-- A stock hash that is gone while the caller has seen a gen counts as rolled back too:
-- the caller rebuilds first, so the release finds the hold the rebuild restored.

local refusal, checkout, ttl, gen, quantity = end_args(KEYS[1], KEYS[2], KEYS[3])
if refusal then
  return refusal
end

if quantity == nil then
  -- The saga registers this release before its reserve runs, so a release
  -- can arrive first (or instead). The tombstone makes a reserve that
  -- arrives later refuse to hold, whether or not the SKU is stocked.
  end_hold(KEYS[3], checkout, 'released', ttl)
  return {8, 0, 0, gen}
end

return drop_hold(KEYS, checkout, quantity, quantity, 'released', ttl, gen)
