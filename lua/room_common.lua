-- The waiting room's books, shared by its scripts (see room.go): each room script runs behind
-- this file. A cart in line speaks for its units (demand, per SKU); every cart in the room,
-- in line or waiting for its sale, counts for its customer (customers: carts; units: units
-- per customer and SKU). Each count goes back to nothing, and its field away, together.

-- count adds sign * n to a hash field, and removes the field once it is back to nothing.
local function count(hash, field, n)
  if redis.call('HINCRBY', hash, field, n) <= 0 then
    redis.call('HDEL', hash, field)
  end
end

-- speak_for counts (sign 1) or stops counting (-1) the units of cart e in line.
local function speak_for(demand, e, sign)
  for _, it in ipairs(e.items) do
    count(demand, it.sku, sign * it.quantity)
  end
end

-- count_customer counts (sign 1) or stops counting (-1) cart e for its customer.
local function count_customer(customers, units, e, sign)
  for _, it in ipairs(e.items) do
    count(units, e.customer_id .. '\0' .. it.sku, sign * it.quantity)
  end
  count(customers, e.customer_id, sign)
end


-- list_drop_sku names sku among the SKUs of the drop that starts at start (a hash field of
-- drop_skus: the SKUs, space-separated), once.
local function list_drop_sku(drop_skus, start, sku)
  local listed = redis.call('HGET', drop_skus, start) or ''
  if not string.find(' ' .. listed .. ' ', ' ' .. sku .. ' ', 1, true) then
    redis.call('HSET', drop_skus, start, listed == '' and sku or listed .. ' ' .. sku)
  end
end
