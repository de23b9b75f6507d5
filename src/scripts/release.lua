-- Give the lease up if it still holds our token: hand it to the first live waiter, who is
-- told on its manager's notify channel and has ARGV[3] ms to claim it; or delete it. Also
-- takes our own member out of the queue, so this is how a waiter that gives up leaves.
-- KEYS[1] lease, KEYS[2] queue, KEYS[3] queue expiry; ARGV[1] token, ARGV[2] notify channel
-- prefix, ARGV[3] claim window ms, ARGV[4] our queue member (token .. manager id), ARGV[5]
-- PUBLISH, or SPUBLISH on a Cluster (the channel then carries this slot's hash tag).
-- The lease's value is the holder's token, with '+' appended once a waiter may be queued
-- (acquire.lua): without it, nobody is, and neither is our own member.
-- Returns 1 if the lease was ours, else 0.
local lease, queue, expiry = KEYS[1], KEYS[2], KEYS[3]
local token = ARGV[1]
local current = redis.call('GET', lease)
if current == token then
  redis.call('DEL', lease)  -- the common path: nobody queued behind us
  return 1
end
local queued = redis.call('EXISTS', queue) == 1
if queued then
  redis.call('ZREM', queue, ARGV[4])
  redis.call('ZREM', expiry, ARGV[4])
end
if current ~= token .. '+' then
  return 0
end
if queued then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local dead = redis.call('ZRANGEBYSCORE', expiry, '-inf', now, 'LIMIT', 0, 64)
  if #dead > 0 then
    redis.call('ZREM', expiry, unpack(dead))
    redis.call('ZREM', queue, unpack(dead))
  end
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if head then
    local next_token = string.sub(head, 1, 32)
    redis.call('ZREM', queue, head)
    redis.call('ZREM', expiry, head)
    local mark = redis.call('EXISTS', queue) == 1 and '+' or ''
    redis.call('SET', lease, next_token .. mark, 'PX', ARGV[3])
    redis.call(ARGV[5], ARGV[2] .. string.sub(head, 33), next_token)
    return 1
  end
end
redis.call('DEL', lease)
return 1
