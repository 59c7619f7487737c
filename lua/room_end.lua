-- Ends a cart's stay in the waiting room (see room.go). The room keeps no ends: a cart that
-- ends without a saga (cancelled while it waited) is recorded in Postgres before it leaves.
--
-- ARGV: cart, how, answer (for how = "leave"), left_ttl (s)
--   how = "leave":  its saga started; the room forgets it, but for a short-lived marker
--                   that lets a GET ?wait sent just after answer at once (answer: the saga's
--                   answer to its start, kept in the marker for the GET that waited).
--   how = "retry":  its saga could not start now; back in line at its place (the next take
--                   requeues it, as for a lease that ran out).
--   how = "forget": its end is recorded (cancelled while in line); only a cart still in line
--                   is forgotten: one being started goes on to its saga, which adopts the end.
-- Returns "ok", or for forget "leaving" (its saga is being started) or "none" (not in line).
local cart, how = ARGV[1], ARGV[2]

-- forget removes the cart from the room wherever it is: taken, or back in line (a start that
-- outlasted its lease ends after the next take put the cart back; a Redis that went back in
-- time may have put it back too), where its units stop counting as spoken for.
local function forget()
  redis.call('ZREM', leaving, cart)
  local raw = redis.call('HGET', carts, cart)
  if redis.call('ZREM', line, cart) == 1 and raw then
    local e = cjson.decode(raw)
    speak_for(e, -1)
    count_customer(e, -1)
  end
  redis.call('HDEL', carts, cart)
end

if how == 'leave' then
  forget()
  local answer = ARGV[3]
  if answer == '' then answer = '1' end
  redis.call('SET', left, answer, 'EX', tonumber(ARGV[4]))
elseif how == 'retry' then
  if redis.call('ZSCORE', leaving, cart) then
    redis.call('ZADD', leaving, 0, cart)
  end
elseif how == 'forget' then
  if redis.call('ZSCORE', leaving, cart) then
    return 'leaving'
  end
  if redis.call('ZREM', early, cart) == 1 then
    -- Waiting for its sale: it spoke for no units yet, only for its customer's.
    local raw = redis.call('HGET', carts, cart)
    if raw then
      count_customer(cjson.decode(raw), -1)
    end
    redis.call('HDEL', carts, cart)
    redis.call('HDEL', draws, cart)
    return 'ok'
  end
  if not redis.call('ZSCORE', line, cart) then
    return 'none'
  end
  forget()
end
return 'ok'
