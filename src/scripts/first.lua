-- (Put first by the build in each script whose first line is '-- (first.lua)': those that
-- mint, read the clock or keep a queue. The rest of what they share, shared.lua, goes where
-- a script's line '-- (shared.lua)' stands, and nowhere else: each function defined costs
-- the server its closure on every call, so a script's common path comes before them.)

-- The server's clock (TIME), read once per call: Redis 7 stops it for the length of a script
-- anyway, and on earlier versions the first reading serves each use here as well as a later
-- one would (a fencing floor above every token minted before this call, a place's expiry).
local clock
local function server_time()
  if not clock then clock = redis.call('TIME') end
  return clock
end

-- The next fencing token of counter `fence`: its INCR, raised to the server's clock in
-- microseconds. Never below the clock: a counter that was lost (a restart without
-- persistence, eviction, FLUSHALL, a failover to a replica that missed INCRs) starts again
-- above every token minted before. Lua numbers are doubles, exact below 2^53 (the clock is
-- ~1.8e15); the counter is written from TIME's own digits, so its text never depends on how
-- a Redis version formats a Lua number. With `fresh_only` (Redlock) only a fresh counter (1)
-- is raised: each master's clock differs, so flooring every mint would make the masters
-- disagree on every acquire and cost the max-register's write-back round trip each time; a
-- master whose counter lags (it was down) is raised by that write-back anyway.
-- Where the clock leads the counter (almost always: one mint per microsecond at most), one
-- SET ... GET writes the clock and reads what it replaces; KEEPTTL leaves the counter's expiry
-- as INCR would (it has none unless someone set one). Otherwise (the counter ran ahead, or
-- holds what INCR must judge: not a plain integer) the old value goes back and INCR decides,
-- as it always did. Redlock's fresh-only mint is INCR.
-- A second mint on the same counter in one call (a group's) is INCR: the first left the
-- counter at the clock (which stands still in a script) or past it.
-- Returns the token, or nil and the error of INCR (the counter holds something else).
local minted
local function mint(fence, fresh_only)
  if not fresh_only and minted ~= fence then
    minted = fence
    local t = server_time()
    local old = redis.pcall('SET', fence, t[1] .. string.sub('00000' .. t[2], -6), 'KEEPTTL',
                            'GET')
    if type(old) == 'table' then return nil, old end  -- WRONGTYPE: nothing was written
    local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if not old then return now_us end
    if #old <= 16 and string.find(old, '^[1-9]%d*$') and tonumber(old) < now_us then
      return now_us
    end
    redis.call('SET', fence, old, 'KEEPTTL')
  end
  local f = redis.pcall('INCR', fence)
  if type(f) == 'table' and f.err then return nil, f end
  if not fresh_only or f == 1 then
    local t = server_time()
    local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if f < now_us then
      f = now_us
      redis.call('SET', fence, t[1] .. string.sub('00000' .. t[2], -6), 'KEEPTTL')
    end
  end
  return f
end

-- The server's clock in milliseconds (the queue expiry's scores are on it).
local function now_ms()
  local t = server_time()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A mutex's lease holds '<token> <data>@<fencing token>' (the holder's record folded into
-- it: one key written and deleted per holding), data being the holder's label ('' when it has
-- none), and for an election's leader a newline and what it proclaimed; then '+' once a
-- waiter may be queued behind it (acquire.lua). Some holdings are written the older way,
-- '<token>' alone, the record '<fencing token>@<token> <data>' in the info key beside it: a
-- lease handed to a waiter (hand_on), until that waiter's claim folds it (so that a waiter
-- of an older build, which knows only that form, can claim it too), and an election's
-- leader (the observers of older builds read it there); a lease on Redlock has no record
-- at all. The lease token ties the record to the holding it was minted for; inspect.lua
-- leaves it out. Tokens are 32 hex digits.

-- The lease value of `token` holding fencing token `term` with `data`; bare on Redlock
-- (`info` nil: no record).
local function lease_value(info, token, term, data)
  if not info then return token end
  return token .. ' ' .. data .. '@' .. term
end

-- A lease set's key lives as long as its last live hold, and as long as its queue (the
-- marker keeps the kind and limit for the waiters): once no hold is live and nobody waits,
-- the resource is free for any kind. Called where the longest hold may have ended early (an
-- extension down, a release); with neither left, the key goes. `queue` is the queue's key,
-- false when the caller knows there is none, or nil for a caller that names the lease set
-- alone (extend_set.lua, so that it follows a Cluster slot's migration key by key): the key
-- then keeps its present expiry for a queue that may be there, but no longer than
-- `place_ms` (a queue place's life) from now.
local function fit_lease_set(lease, queue, place_ms)
  local now = now_ms()
  local last = redis.call('ZREVRANGEBYSCORE', lease, '(+inf', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local ends = last[2] and tonumber(last[2]) or now
  local waiting = -2
  if queue then
    waiting = redis.call('PTTL', queue)
  elseif queue == nil then
    waiting = math.min(redis.call('PTTL', lease), tonumber(place_ms))
  end
  if waiting > 0 then ends = math.max(ends, now + waiting) end
  redis.call('PEXPIREAT', lease, string.format('%.0f', ends))
end
