-- common.lua: helpers that scripts.go puts in front of every script, so no script repeats them.
--
-- hold-ends:{sku} is the hash of a SKU's hold-end markers: holder -> "released:<expiry>" or
-- "committed:<expiry>" (expiry in Unix seconds of Redis's clock, after which sweep.lua may
-- delete it), or "rebuilt" (a placeholder hold from rebuild.lua or reconcile.lua, no expiry).
-- Its field ":layout" is never deleted, so the hash always exists once the SKU was stocked:
-- in a Redis Cluster a script that declares a missing key gets TRYAGAIN for as long as its
-- slot migrates, while every declared key that exists moves with the slot.

-- hold_end returns holder's marker: 'released', 'committed', 'rebuilt' or nil.
local function hold_end(ends, holder)
  local v = redis.call('HGET', ends, holder)
  if not v then
    return nil
  end
  return string.match(v, '^[a-z]+')
end

-- keep_ends makes sure the markers hash exists (see ":layout" above).
local function keep_ends(ends)
  redis.call('HSETNX', ends, ':layout', '2')
end

-- end_hold writes holder's marker how ('released' or 'committed'), kept ttl seconds.
local function end_hold(ends, holder, how, ttl)
  local now = tonumber(redis.call('TIME')[1])
  keep_ends(ends)
  redis.call('HSET', ends, holder, how .. ':' .. (now + ttl))
end

