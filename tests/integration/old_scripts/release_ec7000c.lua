-- release.lua as of commit ec7000c (2026-12-02): the one-hop hand-off, before the holder's
-- record (no info key), with the shared.lua it was built with. Kept verbatim so that tests
-- can play a client of that build beside today's (docs/design-notes.md, mixed versions).
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
-- Give the lease up if it still holds our token: hand it to the first live waiter, or
-- delete it. Also takes our own member out of the queue, so this is how a waiter that gives
-- up leaves.
-- KEYS[1] lease, KEYS[2] queue, KEYS[3] queue expiry, KEYS[4] fencing counter (one slot);
-- ARGV[1] token, ARGV[2] '<our member suffix> <P|S><channel prefix>': P publishes with
-- PUBLISH, S with SPUBLISH (a Cluster: the channel then carries this slot's hash tag).
-- The lease's value is the holder's token, with '+' appended once a waiter may be queued
-- (acquire.lua): without it, nobody is, and neither is our own member.
-- A hand-off is complete in this one step: the waiter's lease is set for its ttl (the ms its
-- member ends with), its fencing token minted, and '<token> <fencing token> <place>'
-- published on its manager's channel, place being the queue entry's expiry as the waiter's
-- last refresh before this release left it: the waiter owns the lock on receipt.
-- Returns 1 if the lease was ours, else 0.
local lease, token = KEYS[1], ARGV[1]
local current = redis.pcall('GET', lease)
if type(current) == 'table' then return 0 end  -- WRONGTYPE: it lapsed and became another kind
if current == token then
  redis.call('DEL', lease)  -- the common path: nobody queued behind us
  return 1
end
local queue, expiry = KEYS[2], KEYS[3]
local space = string.find(ARGV[2], ' ', 1, true)
local queued = redis.call('EXISTS', queue) == 1
if queued then
  local member = token .. string.sub(ARGV[2], 1, space - 1)
  redis.call('ZREM', queue, member)
  redis.call('ZREM', expiry, member)
end
if current ~= token .. '+' then
  return 0
end
if queued then
  drop_dead_waiters(queue, expiry)
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if head then
    local place = redis.call('ZSCORE', expiry, head)
    redis.call('ZREM', queue, head)
    redis.call('ZREM', expiry, head)
    local next_token = string.sub(head, 1, 32)
    local mark = redis.call('EXISTS', queue) == 1 and '+' or ''
    local ttl = string.sub(head, 49)
    local message = next_token
    if #ttl <= 15 and string.find(ttl, '^[1-9]%d*$') then
      redis.call('SET', lease, next_token .. mark, 'PX', ttl)
      local f = mint(KEYS[4], false)
      if f and place then
        message = message .. ' ' .. string.format('%.0f', f) .. ' ' .. place
      end  -- else the waiter claims it with acquire.lua, which mints or reports the error
    else
      -- A member of an older client ends at its manager id: it claims the lease (within its
      -- next refresh, 400 ms) on this message, its token alone.
      redis.call('SET', lease, next_token .. mark, 'PX', 600)
    end
    local command = string.byte(ARGV[2], space + 1) == 83 and 'SPUBLISH' or 'PUBLISH'
    redis.call(command, string.sub(ARGV[2], space + 2) .. string.sub(head, 33, 48), message)
    return 1
  end
end
redis.call('DEL', lease)
return 1
