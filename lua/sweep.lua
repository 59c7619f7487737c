-- sweep.lua: delete hold-end markers whose time is up (Redis 7.0 has no per-field TTL).
--
-- KEYS[1] -> hold-ends:{sku}   hash: holder -> "released:<expiry>" | "committed:<expiry>" | "rebuilt"
-- ARGV[1..n] -> holders whose markers the caller found expired (HSCAN, in batches)
-- Returns {code, deleted, 0, 0}:
--   {0  OK,               markers deleted, 0, 0}
--   {10 INVALID_ARGUMENT, index of the bad ARGV, 0, 0}
--
-- Each marker is judged again here, on Redis's clock: only "released:" and "committed:"
-- markers past their expiry go. "rebuilt" markers (their placeholder hold is live) and the
-- ":layout" field stay, so the hash never disappears.

local now = tonumber(redis.call('TIME')[1])
local deleted = 0
for i = 1, #ARGV do
  if type(ARGV[i]) ~= 'string' or #ARGV[i] == 0 then
    return {INVALID_ARGUMENT, i, 0, 0}
  end
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  local expiry = v and tonumber(string.match(v, '^[a-z]+:([0-9]+)$'))
  if expiry ~= nil and expiry <= now then
    redis.call('HDEL', KEYS[1], ARGV[i])
    deleted = deleted + 1
  end
end
return {OK, deleted, 0, 0}
