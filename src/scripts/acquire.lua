-- Take the lease and mint a fencing token in one atomic step, fairly: waiters queued before
-- us come first, and a lease handed over to us by a release is ours to claim.
-- KEYS[1] lease, KEYS[2] fencing counter (same slot), KEYS[3] queue (zset: member -> arrival),
-- KEYS[4] queue expiry (zset: member -> ms); ARGV[1] token (32 hex digits), ARGV[2] ttl ms,
-- ARGV[3] '1' to join the queue when held, ARGV[4] ms a queued waiter stays without retrying,
-- ARGV[5] the waiter's manager id, ARGV[6] '1' to raise only a fresh counter to the clock
-- (Redlock; see mint). A queue member is token .. manager id.
-- The lease's value is its holder's token, followed by '+' once a waiter may be queued
-- behind it: the release's GET then says whether it must look at the queue at all.
-- Returns {1, fencing_token} when taken, {0, pttl} when not (pttl -2: free but reserved).
-- The fencing token is the counter's INCR, raised to the server's clock in microseconds.
local lease, fence, queue, expiry = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl = ARGV[1], ARGV[2]
local member = token .. ARGV[5]

local function mint()
  local f = redis.pcall('INCR', fence)
  if type(f) == 'table' and f.err then
    -- Never keep a lease whose fencing token could not be minted.
    redis.call('DEL', lease)
    return f
  end
  -- Never below the server's clock in microseconds: a counter that was lost (a restart
  -- without persistence, eviction, FLUSHALL, a failover to a replica that missed INCRs)
  -- starts again above every token minted before. Lua numbers are doubles, exact below
  -- 2^53 (the clock is ~1.8e15); the counter is written from TIME's own digits, so its text
  -- never depends on how a Redis version formats a Lua number.
  -- With ARGV[6] = '1' (Redlock) only a fresh counter (1) is raised: each master's clock
  -- differs, so flooring every mint would make the masters disagree on every acquire and
  -- cost the max-register's write-back round trip each time; a master whose counter lags
  -- (it was down) is raised by that write-back anyway.
  if ARGV[6] ~= '1' or f == 1 then
    local t = redis.call('TIME')
    local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if f < now_us then
      f = now_us
      redis.call('SET', fence, t[1] .. string.sub('00000' .. t[2], -6))
    end
  end
  return {1, f}
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local queued = redis.call('EXISTS', queue) == 1
if not queued and redis.call('SET', lease, token, 'NX', 'PX', ttl) then
  return mint()  -- the common, uncontended path
end
if queued then
  -- Waiters that stopped refreshing their place (crashed) leave the queue.
  local dead = redis.call('ZRANGEBYSCORE', expiry, '-inf', now_ms(), 'LIMIT', 0, 64)
  if #dead > 0 then
    redis.call('ZREM', expiry, unpack(dead))
    redis.call('ZREM', queue, unpack(dead))
  end
end
local current = redis.call('GET', lease)  -- WRONGTYPE if the key holds something else
local marked = token .. '+'
local ours = current == token or current == marked  -- handed over to us by a release
local head_is_us = false
if not current then
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  head_is_us = not head or head == member
end
if ours or head_is_us then
  local others = false
  if queued then
    redis.call('ZREM', queue, member)
    redis.call('ZREM', expiry, member)
    others = redis.call('EXISTS', queue) == 1
  end
  if ours and (current == marked or not others) then
    redis.call('PEXPIRE', lease, ttl)  -- claim it
  else
    redis.call('SET', lease, others and marked or token, 'PX', ttl)
  end
  return mint()
end
if ARGV[3] == '1' then
  if not redis.call('ZSCORE', queue, member) then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    local seq = last[2] and (tonumber(last[2]) + 1) or 1
    redis.call('ZADD', queue, seq, member)
  end
  redis.call('ZADD', expiry, now_ms() + tonumber(ARGV[4]), member)
  -- The queue outlives its last live waiter by one entry lifetime at most: waiters that all
  -- died leave no keys behind on a resource nobody asks for again.
  redis.call('PEXPIRE', queue, ARGV[4])
  redis.call('PEXPIRE', expiry, ARGV[4])
  -- Tell the holder's release that someone waits, keeping the lease's expiry (on Redis 7
  -- the clock stands still in a script, so it is exact; before, it can only come out a
  -- millisecond later, which the holder's own validity never counts on). Only SET and PTTL,
  -- which a lock user has anyway.
  if current and string.byte(current, -1) ~= 43 then
    local left = redis.call('PTTL', lease)
    if left > 0 then redis.call('SET', lease, current .. '+', 'PX', left) end
  end
end
return {0, redis.call('PTTL', lease)}
