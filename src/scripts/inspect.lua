-- (first.lua)
-- KEYS: lease info queue_expiry sets_queue_expiry
-- ARGV:
-- flags: no-writes
-- Read who holds a resource, for how long, and how many wait, in one atomic step that
-- changes nothing (LockManager::async_inspect, Election::async_leader).
-- KEYS[1] lease, KEYS[2] its info (a mutex's holder when not in the lease: first.lua's
-- lease_value), KEYS[3] the mutex queue's expiry, KEYS[4] the lease sets' queue expiry.
-- Returns {what, ms left, info, live waiters, holders, exclusive}: what is 'none', 'mutex',
-- or a lease set's marker ('#S<limit>', '#RW'); ms left -2 when nobody holds it.
-- (shared.lua)
local lease = KEYS[1]
local now = now_ms()
local what = redis.call('TYPE', lease)['ok']
local waiters = redis.call('ZCOUNT', KEYS[3], now, '+inf') + redis.call('ZCOUNT', KEYS[4], now, '+inf')
if what == 'string' then
  -- The record without the lease token (the holder's secret): '<fencing token> <data>'.
  local value = redis.call('GET', lease)
  local term, at = folded_term(value)
  local text
  if term then
    text = term .. ' ' .. string.sub(value, 34, at - 1)
  else
    -- The record beside the lease, if it names the lease's token: after a hand-off by an
    -- older client, the record left there is the previous holder's.
    local record = redis.call('GET', KEYS[2]) or ''
    local f, from = string.match(record, '^(%d+)@()')
    text = ''
    if f and string.sub(record, from, from + 31) == string.sub(value, 1, 32) then
      text = f .. string.sub(record, from + 32)
    end
  end
  return {'mutex', redis.call('PTTL', lease), text, waiters, 1, 0}
end
if what ~= 'zset' then return {'none', -2, '', waiters, 0, 0} end
local marker, holders, last, exclusive = '', 0, -1, 0
local entries = redis.call('ZRANGEBYSCORE', lease, now, '+inf', 'WITHSCORES')
for i = 1, #entries, 2 do
  local member = entries[i]
  if string.byte(member, 1) == 35 then  -- '#': the kind's marker
    marker = member
  else
    holders = holders + 1
    last = math.max(last, tonumber(entries[i + 1]))
    if string.byte(member, 33) == 120 then exclusive = 1 end  -- 'x'
  end
end
return {marker, holders > 0 and last - now or -2, '', waiters, holders, exclusive}
