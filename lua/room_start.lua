-- Sets a SKU's sale start as an operator set it (see room.go), and moves every cart that
-- waits for a sale of the SKU (room_enter.lua, room_pop.lua) to its new start: the latest
-- start of its SKUs now. A start cleared, or moved earlier, holds its carts no longer: a cart
-- whose SKUs are all on sale waits for now, and the next take or entry releases it by its
-- draw, ahead of every later cart, as at any drop's start.
--
-- ARGV: sku, start (ms; "0": on sale)
-- Returns the number of carts moved.
local sku, new = ARGV[1], ARGV[2]
-- On sale is kept as "0", not forgotten: the door takes the operators' word for a SKU they
-- named over the start a replica's catalog cache read a moment before (room_enter.lua).
redis.call('HSET', starts, sku, new)
local now = string.format('%d', now_ms())

-- start_of is the latest start of cart e's SKUs as operators set them (as stored: a hash
-- field and a score), now when every SKU is on sale.
local function start_of(e)
  local latest
  for _, it in ipairs(e.items) do
    local s = redis.call('HGET', starts, it.sku)
    if s and tonumber(s) > 0 and (not latest or tonumber(s) > tonumber(latest)) then
      latest = s
    end
  end
  return latest or now
end

local moved = 0
for _, old in ipairs(redis.call('HKEYS', drop_skus)) do
  local listed = redis.call('HGET', drop_skus, old) or ''
  if string.find(' ' .. listed .. ' ', ' ' .. sku .. ' ', 1, true) then
    for _, cart in ipairs(redis.call('ZRANGEBYSCORE', early, old, old)) do
      local raw = redis.call('HGET', carts, cart)
      local e = raw and cjson.decode(raw)
      local start = e and start_of(e)
      if start and tonumber(start) ~= tonumber(old) then
        for _, it in ipairs(e.items) do
          list_drop_sku(start, it.sku)
        end
        e.starts_at = tonumber(start)
        redis.call('ZADD', early, start, cart)
        redis.call('HSET', carts, cart, cjson.encode(e))
        moved = moved + 1
      end
    end
    if redis.call('ZCOUNT', early, old, old) == 0 then
      redis.call('HDEL', drop_skus, old)
    end
  end
end
return moved
