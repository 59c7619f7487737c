-- Takes the head of the waiting room's line (see room.go): the cart moves to leaving, under
-- a lease, while its saga is started; its units stop counting as spoken for (the reserve
-- script now counts them). First, carts whose lease ran out (their API replica died while
-- starting them) go back in line at the place they had.
--
-- The operators' controls (control: held, pace) are obeyed here: while the line is held
-- nobody leaves it; with a pace, at most that many carts leave it in each second of Redis's
-- clock, across every replica.
--
-- ARGV: now (ms), lease (ms), seed (16 hex digits, random: the draws of carts sent back to
--       wait for their sale)
-- Returns the entry (JSON) of the cart taken, false when the line is empty, held, or past
-- its pace for this second, or {"due", start} when a drop's start has come and its early
-- carts are not in line yet (the caller releases them and takes again).
local now, lease, seed = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local clock = now_ms()

-- Refusals of a drop are kept a while for their buyers' GETs, then forgotten, a few a take.
for _, cart in ipairs(redis.call('ZRANGEBYSCORE', refused, '-inf', clock, 'LIMIT', 0, 100)) do
  redis.call('ZREM', refused, cart)
  redis.call('HDEL', refusals, cart)
end

-- ask counts (sign 1) or stops counting (-1) what a cart in line speaks for.
local function ask(entry, sign)
  speak_for(entry, sign)
  count_customer(entry, sign)
end

for _, cart in ipairs(redis.call('ZRANGEBYSCORE', leaving, '-inf', now)) do
  redis.call('ZREM', leaving, cart)
  local raw = redis.call('HGET', carts, cart)
  if raw then
    local e = cjson.decode(raw)
    redis.call('ZADD', line, e.ticket, cart)
    ask(e, 1)
  end
end

if redis.call('HGET', control, 'held') == '1' then
  return false
end
local pace = tonumber(redis.call('HGET', control, 'pace')) or 0
if pace > 0 then
  local second = string.format('%d', math.floor(clock / 1000)) -- as TIME's seconds read
  if redis.call('HGET', control, 'second') ~= second then
    redis.call('HSET', control, 'second', second, 'taken', 0)
  end
  if tonumber(redis.call('HGET', control, 'taken')) >= pace then
    return false
  end
end

local first = redis.call('ZRANGE', early, 0, 0, 'WITHSCORES')
if #first > 0 and tonumber(first[2]) <= clock then
  return {'due', first[2]}
end

-- future_start is the latest start of cart e's SKUs (as stored: a hash field and a score)
-- when an operator moved one past Redis's clock; nil when every SKU is on sale.
local function future_start(e)
  local latest
  for _, it in ipairs(e.items) do
    local s = redis.call('HGET', starts, it.sku)
    if s and tonumber(s) > clock and (not latest or tonumber(s) > tonumber(latest)) then
      latest = s
    end
  end
  return latest
end

-- wait_for_sale sends cart e back to wait for its sale, as if it came before the start
-- (room_enter.lua): it speaks for no units, still counts for its customer, and gets its
-- place at the start by a draw no client can predict.
local function wait_for_sale(cart, e, start)
  speak_for(e, -1)
  for _, it in ipairs(e.items) do
    list_drop_sku(start, it.sku)
  end
  e.starts_at, e.early, e.ticket = tonumber(start), true, nil
  redis.call('ZADD', early, start, cart)
  redis.call('HSET', draws, cart, string.sub(redis.sha1hex(seed .. cart), 1, 16))
  redis.call('HSET', carts, cart, cjson.encode(e))
end

-- The head, skipping any cart in line without its entry (only keys restored by hand can
-- leave one; room_end.lua forgets a cart from the line and its entry together), and sending
-- back any cart whose sale an operator moved ahead.
local cart, e
repeat
  local head = redis.call('ZRANGE', line, 0, 0)
  if #head == 0 then
    return false
  end
  cart = head[1]
  redis.call('ZREM', line, cart)
  local raw = redis.call('HGET', carts, cart)
  e = raw and cjson.decode(raw)
  local start = e and future_start(e)
  if start then
    wait_for_sale(cart, e, start)
    e = nil
  end
until e
ask(e, -1)
-- How many times the cart was taken: after the first, its saga may exist (a replica that
-- started it and could not say so), and only the saga may answer for it.
e.taken = (e.taken or 0) + 1
local raw = cjson.encode(e)
redis.call('HSET', carts, cart, raw)
redis.call('ZADD', leaving, now + lease, cart)
redis.call('INCR', served)
if pace > 0 then
  redis.call('HINCRBY', control, 'taken', 1)
end
return raw
