-- The waiting room's door (see room.go): one cart asks to enter.
--
-- ARGV: cart, entry (JSON), may_pass ("1": the caller has a place to start the saga now),
--       size (the line's capacity), customer, per_customer (the most carts one customer may
--       have in the room; 0: no cap), starts_at (ms: the latest sale start of the cart's
--       SKUs; 0: none), draw (16 hex digits, random), open (the customer's open checkouts),
--       then per SKU: sku, quantity, available (the caller's read a moment before),
--       max_per_customer (the SKU's; 0: none), owned (the units of it the customer's open and
--       confirmed checkouts hold or bought)
-- Returns {outcome, position, entry}, {"early", 0, entry} (waiting for its sale),
-- {"short", sku, requested, free, ...}, {"full"}, {"busy"} (the customer's carts in the room
-- and open checkouts are per_customer already), {"limit", sku} (the customer's carts and
-- checkouts would ask for more of the SKU than its max_per_customer) or {"due", start} (a
-- drop's start has come and its early carts are not in line yet: the caller releases them,
-- room_release.lua, and asks again).
local cart, entry, may_pass, size = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local customer, per_customer = ARGV[5], tonumber(ARGV[6])
local start, draw = ARGV[7], ARGV[8] -- start as sent: a hash field and a score
local open = tonumber(ARGV[9])
-- The operators' starts win: all of them when they name every SKU of the cart (0: on sale),
-- a later one otherwise.
local named, latest = true, '0'
for i = 10, #ARGV, 5 do
  local set = redis.call('HGET', starts, ARGV[i])
  if not set then
    named = false
  elseif tonumber(set) > tonumber(latest) then
    latest = set
  end
end
if named or tonumber(latest) > tonumber(start) then
  start = latest
end
local starts_at = tonumber(start)
local now = now_ms()

-- A cart already in the room (a retried POST) keeps its place.
if redis.call('ZSCORE', early, cart) then
  return {'early', 0, redis.call('HGET', carts, cart)}
end
local rank = redis.call('ZRANK', line, cart)
if rank then
  return {'queued', rank + 1, redis.call('HGET', carts, cart)}
end
if redis.call('ZSCORE', leaving, cart) then
  return {'queued', 0, redis.call('HGET', carts, cart)}
end

-- Every cart that came before a drop's start is placed ahead of every cart that comes after:
-- none gets a ticket while a due drop's early carts are not in line.
local first = redis.call('ZRANGE', early, 0, 0, 'WITHSCORES')
if #first > 0 and tonumber(first[2]) <= now then
  return {'due', first[2]}
end
local before_sale = starts_at > now

-- A cart passes only when nobody is ahead: none in line, none being started (a cart that
-- passed would race the one being started for the last units), none waiting for a sale.
local waiting = redis.call('ZCARD', line)
if may_pass == '1' and not before_sale and waiting == 0 and redis.call('ZCARD', leaving) == 0
    and redis.call('ZCARD', early) == 0 and redis.call('HGET', control, 'held') ~= '1' then
  return {'pass'}
end
if waiting + redis.call('ZCARD', early) >= size then
  return {'full'}
end
-- A customer's carts in the room speak for units as holds do: one customer may not fill the
-- line (and its units) with carts the saga would refuse for its limits anyway. They count
-- with the customer's checkouts, as the saga's record counts them.
if per_customer > 0 and (tonumber(redis.call('HGET', customers, customer)) or 0) + open >= per_customer then
  return {'busy'}
end
-- Nor with more units of a SKU than the saga would let the customer hold: its carts in the
-- room and its checkouts speak for at most the SKU's max_per_customer.
for i = 10, #ARGV, 5 do
  local max, owned = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  if max > 0 and (tonumber(redis.call('HGET', units, customer .. '\0' .. ARGV[i])) or 0) + owned + tonumber(ARGV[i + 1]) > max then
    return {'limit', ARGV[i]}
  end
end

local e = cjson.decode(entry)
if before_sale then
  -- Waiting for its sale: it holds nothing and speaks for no units yet (who came first must
  -- not matter), and gets its place at the start, by its draw (room_release.lua).
  for i = 10, #ARGV, 5 do
    list_drop_sku(start, ARGV[i])
  end
  count_customer(e, 1)
  e.starts_at, e.early = starts_at, true
  entry = cjson.encode(e)
  redis.call('ZADD', early, start, cart)
  redis.call('HSET', draws, cart, draw)
  redis.call('HSET', carts, cart, entry)
  return {'early', 0, entry}
end

-- The units still free, less those the carts ahead asked for: a cart that cannot be served
-- from what is left is told at once. The reserve script stays the judge of every hold; this
-- only refuses early.
local short = {'short'}
for i = 10, #ARGV, 5 do
  local sku, qty, available = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local free = available - (tonumber(redis.call('HGET', demand, sku)) or 0)
  if free < qty then
    if free < 0 then free = 0 end
    short[#short + 1] = sku
    short[#short + 1] = qty
    short[#short + 1] = free
  end
end
if #short > 1 then
  return short
end

speak_for(e, 1)
count_customer(e, 1)
e.ticket = redis.call('INCR', seq)
entry = cjson.encode(e)
redis.call('ZADD', line, e.ticket, cart)
redis.call('HSET', carts, cart, entry)
return {'queued', waiting + 1, entry}
