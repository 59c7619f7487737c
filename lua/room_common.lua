-- The waiting room's keys and books, shared by its scripts (see room.go): each room script
-- runs behind this file. Every key is the room's (one hash tag, one Cluster slot), so the
-- order of arrival is one order for every API replica, and Redis's clock is the one clock of
-- a scheduled drop. Room.keys sends them in this order:
--   line       zset cart -> ticket: the carts in line
--   carts      hash cart -> entry (JSON): every cart in the room
--   demand     hash sku -> units the carts in line speak for
--   seq        ticket counter
--   leaving    zset cart -> lease deadline (ms): carts whose saga is being started
--   served     counter of carts ever taken from the line
--   customers  hash customer -> carts in the room
--   units      hash customer NUL sku -> units the customer's carts in the room ask for
--   control    hash of the operators' controls: held "1"; pace (carts a second), second
--              and taken (the pace's current second and the carts taken in it)
--   early      zset cart -> the start of its drop (ms): carts that came before it
--   draws      hash cart -> its random draw (16 hex digits) for its place at the start
--   drop_skus  hash start -> the SKUs of its early carts, space-separated
--   starts     hash sku -> its sale start (ms) as an operator set it; 0: on sale
--   refused    zset cart -> when its refusal at a drop's start may be forgotten (ms)
--   refusals   hash cart -> its shortages at the drop's start (JSON)
--   left       the cart's marker (room_end.lua): it left for its saga a moment ago
local line, carts, demand, seq, leaving, served, customers, units, control, early, draws, drop_skus, starts, refused,
  refusals, left = unpack(KEYS)

-- now_ms is Redis's clock, in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A cart in line speaks for its units (demand, per SKU); every cart in the room, in line or
-- waiting for its sale, counts for its customer (customers: carts; units: units per customer
-- and SKU). Each count goes back to nothing, and its field away, together.

-- count adds sign * n to a hash field, and removes the field once it is back to nothing.
local function count(hash, field, n)
  if redis.call('HINCRBY', hash, field, n) <= 0 then
    redis.call('HDEL', hash, field)
  end
end

-- speak_for counts (sign 1) or stops counting (-1) the units of cart e in line.
local function speak_for(e, sign)
  for _, it in ipairs(e.items) do
    count(demand, it.sku, sign * it.quantity)
  end
end

-- count_customer counts (sign 1) or stops counting (-1) cart e for its customer.
local function count_customer(e, sign)
  for _, it in ipairs(e.items) do
    count(units, e.customer_id .. '\0' .. it.sku, sign * it.quantity)
  end
  count(customers, e.customer_id, sign)
end

-- list_drop_sku names sku among the SKUs of the drop that starts at start, once.
local function list_drop_sku(start, sku)
  local listed = redis.call('HGET', drop_skus, start) or ''
  if not string.find(' ' .. listed .. ' ', ' ' .. sku .. ' ', 1, true) then
    redis.call('HSET', drop_skus, start, listed == '' and sku or listed .. ' ' .. sku)
  end
end
