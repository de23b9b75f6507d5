-- (Put before acquire.lua and release.lua by the build: what both do.)

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
-- Returns the token, or nil and the error of INCR (the counter holds something else).
local function mint(fence, fresh_only)
  local f = redis.pcall('INCR', fence)
  if type(f) == 'table' and f.err then return nil, f end
  if not fresh_only or f == 1 then
    local t = server_time()
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
  local t = server_time()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Waiters that stopped refreshing their place (crashed) leave the queue: every place that
-- lapsed, up to 10,000 a call (in steps of 1,000; each costs the server about 1.3 us, so a
-- call spends 13 ms at most, once per crash: a place is removed once), in the order they
-- lapsed, wherever they are in the queue. Then a head with no place at all (its expiry entry
-- lost: an evicted or deleted key) leaves too, up to 1,000 a call. Returns the clock it
-- used, and the queue's head and that head's place (nil, nil: nobody is left; a head and nil:
-- the 1,000 ran out, the next head has no place either). With more lapsed places than 10,000
-- the head's place may still have lapsed: callers serve nobody whose place lapsed (lapsed),
-- and the next call removes the next 10,000.
local function drop_dead_waiters(queue, expiry)
  local now = now_ms()
  for _ = 1, 10 do
    local dead = redis.call('ZRANGEBYSCORE', expiry, '-inf', now, 'LIMIT', 0, 1000)
    if #dead == 0 then break end
    redis.call('ZREM', expiry, unpack(dead))
    redis.call('ZREM', queue, unpack(dead))
    if #dead < 1000 then break end
  end
  for _ = 1, 1000 do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then return now end
    local place = redis.call('ZSCORE', expiry, head)
    if place then return now, head, place end
    redis.call('ZREM', queue, head)
  end
  -- The 1,000 ran out: whoever is first now is still ahead of a newcomer (without a place,
  -- it is served by nobody: lapsed).
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  return now, head, head and redis.call('ZSCORE', expiry, head)
end

-- Whether the queue place `place` (its expiry, from ZSCORE; nil: none) has lapsed at `now`.
local function lapsed(place, now)
  return not place or tonumber(place) <= now
end

-- PUBLISH (how 'P') or SPUBLISH (how 'S': a Cluster's shard channel, of this slot) `message`
-- on the channel that follows the letter in `how`, plus `tail`.
local function publish(how, tail, message)
  local command = string.byte(how, 1) == 83 and 'SPUBLISH' or 'PUBLISH'
  redis.call(command, string.sub(how, 2) .. tail, message)
end

-- Who holds a mutex's lease: its info key holds '<fencing token>@<lease token> <data>' for
-- the lease's ttl, data being the holder's label ('' when it has none), and for an
-- election's leader a newline and what it proclaimed. The lease token ties the record to the
-- holding it was minted for (acquire.lua's claim reuses the fencing token only then);
-- inspect.lua leaves it out. `announce` (an election's: '<P|S><channel>', or nil) tells the
-- observers '<fencing token> <ttl ms> <data>'.
local function record(info, f, token, data, ttl, announce)
  local term = string.format('%.0f', f)
  if info then redis.call('SET', info, term .. '@' .. token .. ' ' .. data, 'PX', ttl) end
  if announce then publish(announce, '', term .. ' ' .. ttl .. ' ' .. data) end
end

-- A mutex's lease ended with nobody after it: its info goes, and an election's observers
-- hear '- <fencing token>' (the leader that ended).
local function ended(lease, info, announce)
  if not info then return redis.call('DEL', lease) end
  if announce then
    local text = redis.call('GET', info)
    local term = text and string.match(text, '^%d+') or '0'
    publish(announce, '', '- ' .. term)
  end
  return redis.call('DEL', lease, info)
end

-- Hands a mutex's lease to the first waiter of `queue`, if any whose place has not lapsed
-- (returns true then; never to a lapsed place, see drop_dead_waiters): the
-- lease is set for the waiter's ttl (the digits after its manager id, at member byte 49, up
-- to a space), its fencing token minted, its info recorded (the member's data follows that
-- space) and '<token> <fencing token> <place>' published on its manager's channel
-- (`how`: '<P|S><channel prefix>', the manager id completing it), place being the queue
-- entry's expiry as the waiter's last refresh left it. The message is a wake-up: the
-- waiter claims the lease with an attempt, whose reply (not the message) grants it.
local function hand_on(lease, queue, expiry, fence, info, how, announce)
  local now, head, place = drop_dead_waiters(queue, expiry)
  if not head or lapsed(place, now) then return false end
  redis.call('ZREM', queue, head)
  redis.call('ZREM', expiry, head)
  local next_token = string.sub(head, 1, 32)
  local mark = redis.call('EXISTS', queue) == 1 and '+' or ''
  local rest = string.sub(head, 49)
  local gap = string.find(rest, ' ', 1, true)
  local ttl = gap and string.sub(rest, 1, gap - 1) or rest
  local message = next_token
  if #ttl <= 15 and string.find(ttl, '^[1-9]%d*$') then
    redis.call('SET', lease, next_token .. mark, 'PX', ttl)
    local f = mint(fence, false)
    if f then
      record(info, f, next_token, gap and string.sub(rest, gap + 1) or '', ttl, announce)
      message = message .. ' ' .. string.format('%.0f', f) .. ' ' .. place
    elseif info then
      redis.call('DEL', info)  -- the waiter claims it with acquire.lua, which reports the error
    end
  else
    -- A member of an older client ends at its manager id: it claims the lease (within its
    -- next refresh, 400 ms) on this message, its token alone.
    redis.call('SET', lease, next_token .. mark, 'PX', 600)
    if info then redis.call('DEL', info) end
  end
  publish(how, string.sub(head, 33, 48), message)
  return true
end

-- A lease set's key lives as long as its last live hold, and as long as its queue (the
-- marker keeps the kind and limit for the waiters): once no hold is live and nobody waits,
-- the resource is free for any kind. Called where the longest hold may have ended early (an
-- extension down, a release); with neither left, the key goes. `queue` is the queue's key,
-- or nil for a caller that names the lease set alone (extend_set.lua, so that it follows a
-- Cluster slot's migration key by key): the key then keeps its present expiry for a queue
-- that may be there, but no longer than `place_ms` (a queue place's life) from now.
local function fit_lease_set(lease, queue, place_ms)
  local now = now_ms()
  local last = redis.call('ZREVRANGEBYSCORE', lease, '(+inf', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local ends = last[2] and tonumber(last[2]) or now
  local waiting
  if queue then
    waiting = redis.call('PTTL', queue)
  else
    waiting = math.min(redis.call('PTTL', lease), tonumber(place_ms))
  end
  if waiting > 0 then ends = math.max(ends, now + waiting) end
  redis.call('PEXPIREAT', lease, string.format('%.0f', ends))
end
-- Take the lease and mint a fencing token in one atomic step, fairly: waiters queued before
-- us come first, and a lease handed over to us by a release is ours to claim.
-- KEYS[1] lease, KEYS[2] fencing counter (same slot), KEYS[3] queue (zset: member -> arrival),
-- KEYS[4] queue expiry (zset: member -> ms), KEYS[5] the lease's info (who holds it, see
-- shared.lua's record; none on Redlock); ARGV[1] token (32 hex digits), ARGV[2] ttl ms,
-- ARGV[3] '<mode><place ms> <member suffix>': mode '1' joins the queue when held, '0' does
-- not, 'R' does not and floors only a fresh counter (Redlock, see mint); place ms: how long
-- a queued waiter keeps its place without retrying; the member suffix: the waiter's manager
-- id (16 hex digits: its notify channel) and its ttl in ms (for a lease handed to it), then
-- optionally a space and the data recorded in the info when the lease is its (the holder's
-- label, and an election's value); ARGV[4] (an election's candidate only) '<P|S><channel>'
-- on which a new leader is announced. A queue member is token .. member suffix.
-- The lease's value is its holder's token, followed by '+' once a waiter may be queued
-- behind it: the release's GET then says whether it must look at the queue at all.
-- Returns {1, fencing_token} when taken; {0, pttl} when not (pttl -2: free but reserved),
-- and {0, pttl, place} when queued, place being the entry's expiry (a release that hands
-- the lease to this waiter tells it which of its refreshes it saw by that number).
local lease, fence, queue, expiry = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, how = ARGV[1], ARGV[2], ARGV[3]
local space = string.find(how, ' ', 2, true) or #how + 1

local function take()
  local f, err = mint(fence, string.byte(how, 1) == 82)  -- 'R'
  if not f then
    redis.call('DEL', lease)  -- never keep a lease whose fencing token could not be minted
    return err
  end
  if KEYS[5] then
    local gap = string.find(how, ' ', space + 1, true)
    record(KEYS[5], f, token, gap and string.sub(how, gap + 1) or '', ttl, ARGV[4])
  end
  return {1, f}
end

local queued = redis.call('EXISTS', queue) == 1
if not queued and redis.call('SET', lease, token, 'NX', 'PX', ttl) then
  return take()  -- the common, uncontended path
end
local member = token .. string.sub(how, space + 1)
local current = redis.call('GET', lease)  -- WRONGTYPE if the key holds something else
local marked = token .. '+'
local ours = current == token or current == marked  -- handed over to us by a release
-- A claim takes what was handed to it without looking at the queue's dead (the release
-- that handed it on purged them a moment ago); anyone else purges, and learns the head.
local now, head
if queued and not ours then now, head = drop_dead_waiters(queue, expiry) end
local head_is_us = not current and (not head or head == member)
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
  if ours and KEYS[5] then
    -- The release that handed it to us minted our token and recorded it beside our lease
    -- token (an election's observers heard it as the term): keep that one, so that one
    -- holding has one token. A record of another lease's (an older client's hand-off records
    -- none and leaves the last holder's) is not ours: mint. The record lives and dies with
    -- the holding it names, and every grant on this resource writes or deletes it, so no
    -- token was minted here since.
    local text = redis.call('GET', KEYS[5])
    local f = text and string.match(text, '^(%d+)@' .. token .. ' ')
    if f then
      redis.call('PEXPIRE', KEYS[5], ttl)
      return {1, tonumber(f)}
    end
  end
  return take()
end
if string.byte(how, 1) ~= 49 then  -- '1'
  return {0, redis.call('PTTL', lease)}
end
if not redis.call('ZSCORE', queue, member) then
  local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
  local seq = last[2] and (tonumber(last[2]) + 1) or 1
  redis.call('ZADD', queue, seq, member)
end
local place_ms = string.sub(how, 2, space - 1)
local place = (now or now_ms()) + tonumber(place_ms)
redis.call('ZADD', expiry, place, member)
-- The queue outlives its last live waiter by one entry lifetime at most: waiters that all
-- died leave no keys behind on a resource nobody asks for again.
redis.call('PEXPIRE', queue, place_ms)
redis.call('PEXPIRE', expiry, place_ms)
-- Tell the holder's release that someone waits, keeping the lease's expiry (on Redis 7 the
-- clock stands still in a script, so it is exact; before, it can only come out a
-- millisecond later, which the holder's own validity never counts on). Only SET and PTTL,
-- which a lock user has anyway.
local left = redis.call('PTTL', lease)
if current and string.byte(current, -1) ~= 43 and left > 0 then
  redis.call('SET', lease, current .. '+', 'PX', left)
end
return {0, left, place}
