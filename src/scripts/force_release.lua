-- (first.lua)
-- KEYS: lease queue queue_expiry fence info sets_queue sets_queue_expiry
-- ARGV: notify announce
-- flags: allow-oom
-- Take a resource away from whoever holds it (LockManager::async_force_release): a mutex's
-- lease goes to its first live waiter (hand_on) or is deleted; a lease set loses every hold,
-- and its first waiters are told to try again at once. The next holder's fencing token is
-- minted from the same counter, so it is larger than every evicted holder's.
-- KEYS[1] lease, KEYS[2] mutex queue, KEYS[3] its expiry, KEYS[4] fencing counter, KEYS[5]
-- info, KEYS[6] lease sets' queue, KEYS[7] its expiry (one slot); ARGV[1] '<P|S><channel
-- prefix>' of the waiters' managers, ARGV[2] '<P|S><channel>' of an election's observers.
-- Returns 1 if anybody held it, else 0. Either way what had lapsed goes: a lease set's lapsed
-- holds and dead waiters (its key too when nobody is left), and its first live waiters
-- are nudged to try again.
-- (shared.lua)
local lease = KEYS[1]
local what = redis.call('TYPE', lease)['ok']
if what == 'string' then
  if redis.call('EXISTS', KEYS[2]) == 1 and
     hand_on(lease, KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2]) then
    return 1
  end
  ended(lease, KEYS[5], ARGV[2], redis.call('GET', lease))
  return 1
end
if what ~= 'zset' then return 0 end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', lease, '-inf', '(' .. now)
local evicted = 0
for _, member in ipairs(redis.call('ZRANGE', lease, 0, -1)) do
  if string.byte(member, 1) ~= 35 then  -- not the '#' marker
    redis.call('ZREM', lease, member)
    evicted = evicted + 1
  end
end
if redis.call('EXISTS', KEYS[6]) == 1 then drop_dead_waiters(KEYS[6], KEYS[7]) end
if redis.call('EXISTS', KEYS[6]) == 0 then
  redis.call('DEL', lease)
else
  -- The marker stays with the queue (and no longer than it); its first waiters try again
  -- now (a nudge: the token).
  fit_lease_set(lease, KEYS[6])
  for _, member in ipairs(redis.call('ZRANGE', KEYS[6], 0, 63)) do
    publish(ARGV[1], string.sub(member, 33, 48), string.sub(member, 1, 32))
  end
end
if evicted > 0 then return 1 end
return 0
