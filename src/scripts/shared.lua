-- (Put before acquire.lua and release.lua by the build: what both do.)

-- The next fencing token of counter `fence`: its INCR, raised to the server's clock in
-- microseconds. Never below the clock: a counter that was lost (a restart without
-- persistence, eviction, FLUSHALL, a failover to a replica that missed INCRs) starts again
-- above every token minted before. Lua numbers are doubles, exact below 2^53 (the clock is
-- ~1.8e15); the counter is written from TIME's own digits, so its text never depends on how
-- a Redis version formats a Lua number. With `fresh_only` (Redlock) only a fresh counter (1)
-- is raised: each master's clock differs, so flooring every mint would make the masters
-- disagree on every acquire and cost the max-register's write-back round trip each time; a
-- master whose counter lags (it was down) is raised by that write-back anyway.
-- Returns the token, or nil and the error of INCR (the counter holds something else).
local function mint(fence, fresh_only)
  local f = redis.pcall('INCR', fence)
  if type(f) == 'table' and f.err then return nil, f end
  if not fresh_only or f == 1 then
    local t = redis.call('TIME')
    local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if f < now_us then
      f = now_us
      redis.call('SET', fence, t[1] .. string.sub('00000' .. t[2], -6))
    end
  end
  return f
end


-- The server's clock in milliseconds (the queue expiry's scores are on it).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Waiters that stopped refreshing their place (crashed) leave the queue, 64 at a time.
local function drop_dead_waiters(queue, expiry)
  local dead = redis.call('ZRANGEBYSCORE', expiry, '-inf', now_ms(), 'LIMIT', 0, 64)
  if #dead > 0 then
    redis.call('ZREM', expiry, unpack(dead))
    redis.call('ZREM', queue, unpack(dead))
  end
end
