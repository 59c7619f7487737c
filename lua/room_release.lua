-- Releases a drop (see room.go): at its start, the carts that came before it take their
-- places in line in the order of their random draws, ahead of every cart that comes after.
-- Each is judged as the door judges a cart: one whose units the carts ahead of it (in line,
-- or released before it) already speak for is refused, holding nothing, and its refusal is
-- kept a while for its buyer's GET. The reserve script stays the judge of every hold.
--
-- ARGV: start (ms, as the door returned it), refusal_ttl (ms), then per SKU of the drop:
--       sku, available (read just before)
-- Returns {"released", carts put in line, carts refused} (none of either when the drop was
-- released already), or {"not_due"} when its start has not come.
local start, ttl = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
if tonumber(start) > now then
  return {'not_due'}
end
local available = {}
for i = 3, #ARGV, 2 do
  available[ARGV[i]] = tonumber(ARGV[i + 1])
end

local members = redis.call('ZRANGEBYSCORE', early, start, start)
local order = {}
for _, cart in ipairs(members) do
  order[#order + 1] = {cart = cart, draw = redis.call('HGET', draws, cart) or ''}
end
-- The draws are fixed-width hex: their text order is their number order.
table.sort(order, function(a, b)
  if a.draw == b.draw then return a.cart < b.cart end
  return a.draw < b.draw
end)

local released, refused_n = 0, 0
for _, o in ipairs(order) do
  local raw = redis.call('HGET', carts, o.cart)
  if raw then
    local e = cjson.decode(raw)
    local short = {}
    for _, it in ipairs(e.items) do
      local free = (available[it.sku] or 2147483647) - (tonumber(redis.call('HGET', demand, it.sku)) or 0)
      if free < it.quantity then
        if free < 0 then free = 0 end
        short[#short + 1] = {sku = it.sku, requested = it.quantity, available = free}
      end
    end
    if #short == 0 then
      speak_for(e, 1)
      e.early, e.ticket = nil, redis.call('INCR', seq)
      redis.call('HSET', carts, o.cart, cjson.encode(e))
      redis.call('ZADD', line, e.ticket, o.cart)
      released = released + 1
    else
      count_customer(e, -1)
      redis.call('HDEL', carts, o.cart)
      redis.call('ZADD', refused, now + ttl, o.cart)
      redis.call('HSET', refusals, o.cart, cjson.encode(short))
      refused_n = refused_n + 1
    end
  end
  redis.call('HDEL', draws, o.cart)
end
redis.call('ZREMRANGEBYSCORE', early, start, start)
redis.call('HDEL', drop_skus, start)
return {'released', released, refused_n}
