-- Ends a cart's stay in the waiting room (see room.go).
--
-- KEYS: line, carts, demand, leaving, end (the cart's end marker), left (its left marker),
--       customers
-- ARGV: cart, how, end (JSON, for how = "refuse" or "cancel"), end_ttl (s), left_ttl (s)
--   how = "leave":  its saga started; the room forgets it, but for a short-lived marker
--                   that lets a GET ?wait sent just after answer at once (end: the saga's
--                   answer to its start, kept in the marker for the GET that waited).
--   how = "retry":  its saga could not start now; back in line at its place (the next take
--                   requeues it, as for a lease that ran out).
--   how = "refuse": refused at its turn without a saga; the end is kept for GET and retries.
--   how = "cancel": cancelled while in line; the end is kept. Only a cart still in line can
--                   be cancelled here.
-- Returns "ok", or for cancel "leaving" (its saga is being started) or "none" (not in line).
local line, carts, demand, leaving, endkey, left, customers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local cart, how, ended, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])

-- forget removes the cart from the room wherever it is: taken, or back in line (a start that
-- outlasted its lease ends after the next take put the cart back; a Redis that went back in
-- time may have put it back too), where its units stop counting as spoken for.
local function forget()
  redis.call('ZREM', leaving, cart)
  local raw = redis.call('HGET', carts, cart)
  if redis.call('ZREM', line, cart) == 1 and raw then
    local e = cjson.decode(raw)
    for _, it in ipairs(e.items) do
      local n = redis.call('HINCRBY', demand, it.sku, -it.quantity)
      if n <= 0 then redis.call('HDEL', demand, it.sku) end
    end
    if redis.call('HINCRBY', customers, e.customer_id, -1) <= 0 then
      redis.call('HDEL', customers, e.customer_id)
    end
  end
  redis.call('HDEL', carts, cart)
end

if how == 'leave' then
  forget()
  local answer = ended
  if answer == '' then answer = '1' end
  redis.call('SET', left, answer, 'EX', tonumber(ARGV[5]))
elseif how == 'retry' then
  if redis.call('ZSCORE', leaving, cart) then
    redis.call('ZADD', leaving, 0, cart)
  end
elseif how == 'refuse' then
  forget()
  redis.call('SET', endkey, ended, 'EX', ttl)
elseif how == 'cancel' then
  if redis.call('ZSCORE', leaving, cart) then
    return 'leaving'
  end
  if not redis.call('ZSCORE', line, cart) or not redis.call('HEXISTS', carts, cart) then
    return 'none'
  end
  forget()
  redis.call('SET', endkey, ended, 'EX', ttl)
end
return 'ok'
