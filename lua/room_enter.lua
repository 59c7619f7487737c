-- The waiting room's door (see room.go). One cart asks to enter; every key is the room's
-- (one hash tag, one Cluster slot), so the order of arrival is one order for every API
-- replica.
--
-- KEYS: line (zset cart -> ticket), carts (hash cart -> entry), demand (hash sku -> units
--       asked by carts in line), seq (ticket counter), leaving (zset cart -> lease deadline),
--       customers (hash customer -> carts in line), units (hash customer NUL sku -> units
--       the customer's carts in line ask for), control (the operators': held "1" lets no
--       cart pass)
-- ARGV: cart, entry (JSON), may_pass ("1": the caller has a place to start the saga now),
--       size (the line's capacity), customer, per_customer (the most carts one customer may
--       have in line; 0: no cap), then per SKU: sku, quantity, available (read just before),
--       max_per_customer (the SKU's; 0: none)
-- Returns {outcome, position, entry}, {"short", sku, requested, free, ...}, {"full"},
-- {"busy"} (the customer has per_customer carts in line already) or {"limit", sku} (the
-- customer's carts in line would ask for more of the SKU than its max_per_customer).
local line, carts, demand, seq, leaving, customers, units, control =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local cart, entry, may_pass, size = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local customer, per_customer = ARGV[5], tonumber(ARGV[6])

-- A cart already in line (a retried POST) keeps its place.
local rank = redis.call('ZRANK', line, cart)
if rank then
  return {'queued', rank + 1, redis.call('HGET', carts, cart)}
end
if redis.call('ZSCORE', leaving, cart) then
  return {'queued', 0, redis.call('HGET', carts, cart)}
end

-- A cart passes only when nobody is ahead: none in line, none being started (a cart that
-- passed would race the one being started for the last units).
local waiting = redis.call('ZCARD', line)
if may_pass == '1' and waiting == 0 and redis.call('ZCARD', leaving) == 0
    and redis.call('HGET', control, 'held') ~= '1' then
  return {'pass'}
end
if waiting >= size then
  return {'full'}
end
-- A customer's carts in line speak for units as holds do: one customer may not fill the
-- line (and its units) with carts the saga would refuse for its limits anyway.
if per_customer > 0 and (tonumber(redis.call('HGET', customers, customer)) or 0) >= per_customer then
  return {'busy'}
end
-- Nor with more units of a SKU than the saga would let the customer hold: its carts in line
-- speak for at most the SKU's max_per_customer.
for i = 7, #ARGV, 4 do
  local max = tonumber(ARGV[i + 3])
  if max > 0 and (tonumber(redis.call('HGET', units, customer .. '\0' .. ARGV[i])) or 0) + tonumber(ARGV[i + 1]) > max then
    return {'limit', ARGV[i]}
  end
end

-- The units still free, less those the carts ahead asked for: a cart that cannot be served
-- from what is left is told at once. The reserve script stays the judge of every hold; this
-- only refuses early.
local short = {'short'}
for i = 7, #ARGV, 4 do
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

for i = 7, #ARGV, 4 do
  redis.call('HINCRBY', demand, ARGV[i], ARGV[i + 1])
  redis.call('HINCRBY', units, customer .. '\0' .. ARGV[i], ARGV[i + 1])
end
redis.call('HINCRBY', customers, customer, 1)
local ticket = redis.call('INCR', seq)
local e = cjson.decode(entry)
e.ticket = ticket
entry = cjson.encode(e)
redis.call('ZADD', line, ticket, cart)
redis.call('HSET', carts, cart, entry)
return {'queued', waiting + 1, entry}
