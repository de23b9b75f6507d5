-- (Put first by the build in every script that mints, reads the clock or keeps a queue: what
-- their common paths need. The rest of what they share, shared.lua, goes where a script's
-- line '-- (shared.lua)' stands, and nowhere else: each function defined costs the server
-- its closure on every call, so a script's common path comes before them.)

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
-- Give the lease up if it still holds our token: hand it to the first live waiter, or
-- delete it. Otherwise takes our own member out of the queue: this is how a waiter that
-- gives up leaves.
-- KEYS[1] lease, KEYS[2] queue, KEYS[3] queue expiry, KEYS[4] fencing counter, KEYS[5] the
-- lease's info (the record of a lease handed over, and a leader's: first.lua's
-- lease_value; none on Redlock), all of one slot; ARGV[1] token, ARGV[2] our member suffix
-- (after a space, a waiter's data: its label, a candidate's value), ARGV[3] '<P|S><channel
-- prefix>': P publishes with PUBLISH, S with SPUBLISH (a Cluster: the channel then carries
-- this slot's hash tag); ARGV[4] (an election's leader only) '<P|S><channel>' on which the
-- change of leader is announced.
-- The lease's value is the holder's token and record (first.lua's lease_value), with '+'
-- appended once a waiter may be queued (acquire.lua): without it, nobody is, and neither is
-- our own member.
-- A hand-off is set up in this one step (hand_on); the waiter claims it on the message.
-- Returns 1 if the lease was ours, else 0.
local lease, token, info, announce = KEYS[1], ARGV[1], KEYS[5], ARGV[4]
local current = redis.pcall('GET', lease)
if type(current) == 'table' then return 0 end  -- WRONGTYPE: it lapsed and became another kind
-- The common path: our lease, nobody queued behind it (no '+'), its record folded into it
-- (or none: Redlock), no election to tell.
if current and not announce and string.byte(current, -1) ~= 43 and
   (string.byte(current, 33) == 32 and string.sub(current, 1, 32) == token or
    not info and current == token) then
  return redis.call('DEL', lease)
end
-- (Put by the build where a script's line '-- (shared.lua)' stands, after first.lua: what the
-- scripts share beyond their common paths.)

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

-- Whether the lease's value `value` is the holding of `token` (either form, marked or not).
local function holds(value, token)
  if not value or string.sub(value, 1, 32) ~= token then return false end
  local after = string.byte(value, 33)
  return not after or after == 32 or (after == 43 and #value == 33)  -- ' ', a lone '+'
end

-- Whether a waiter may be queued behind the lease `value` (its '+').
local function marked(value)
  return string.byte(value, -1) == 43
end

-- The fencing token folded into the lease `value` (as text), and where its '@' is; nil when
-- the lease holds no record (Redlock, a hand-off not yet claimed, another build's lease).
local function folded_term(value)
  if string.byte(value, 33) ~= 32 then return nil end
  local at, _, term = string.find(value, '@(%d+)%+?$', 34)
  return term, at
end

-- Tells an election's observers of a new term: `announce` ('<P|S><channel>', or nil) hears
-- '<fencing token> <ttl ms> <data>'.
local function announce_term(announce, term, ttl, data)
  if announce then publish(announce, '', term .. ' ' .. ttl .. ' ' .. data) end
end

-- The record of a lease handed to a waiter (hand_on), in the info key for its ttl, and the
-- observers' news of it.
local function record(info, f, token, data, ttl, announce)
  local term = string.format('%.0f', f)
  if info then redis.call('SET', info, term .. '@' .. token .. ' ' .. data, 'PX', ttl) end
  announce_term(announce, term, ttl, data)
end

-- A mutex's lease `value` ended with nobody after it: the lease goes (and the info key when
-- the record is there), and an election's observers hear '- <fencing token>' (the leader
-- that ended).
local function ended(lease, info, announce, value)
  if not info then return redis.call('DEL', lease) end
  local term = folded_term(value)
  if term then
    if announce then publish(announce, '', '- ' .. term) end
    return redis.call('DEL', lease)
  end
  if announce then
    local text = redis.call('GET', info)
    publish(announce, '', '- ' .. (text and string.match(text, '^%d+') or '0'))
  end
  return redis.call('DEL', lease, info)
end

-- Hands a mutex's lease to the first waiter of `queue`, if any whose place has not lapsed
-- (returns true then; never to a lapsed place, see drop_dead_waiters): the
-- lease is set for the waiter's ttl (the digits after its manager id, at member byte 49, or
-- after the 'f' there, up to a space), its fencing token minted, its record written (the
-- member's data follows that space) and '<token> <fencing token> <place>' published on its
-- manager's channel (`how`: '<P|S><channel prefix>', the manager id completing it), place
-- being the queue entry's expiry as the waiter's last refresh left it. The message is a
-- wake-up: the waiter claims the lease with an attempt, whose reply (not the message)
-- grants it. A waiter of this build ('f' after its manager id) gets the record folded into
-- the lease (first.lua's lease_value), which its claim keeps as it is; a waiter of the
-- build before (digits there), and an election's candidate, get it beside the lease in the
-- info key, the form they claim.
local function hand_on(lease, queue, expiry, fence, info, how, announce)
  -- The first two in line, and the first's place: a live first is served as it is (the dead
  -- further back go when they reach the front, or when a joiner finds the lease free); a
  -- first whose place lapsed or is lost means waiters died, and the queue's dead are purged
  -- before anyone is served. (ZRANGE and ZREM, not ZPOPMIN: none but the commands
  -- docs/security.md's least-privilege list already grants.)
  local now = now_ms()
  local heads = redis.call('ZRANGE', queue, 0, 1)
  local head = heads[1]
  local place = head and redis.call('ZSCORE', expiry, head)
  if head and lapsed(place, now) then
    now, head, place = drop_dead_waiters(queue, expiry)
    heads = nil
  end
  if not head or lapsed(place, now) then return false end
  redis.call('ZREM', queue, head)
  redis.call('ZREM', expiry, head)
  local others
  if heads then others = heads[2] ~= nil else others = redis.call('EXISTS', queue) == 1 end
  local next_token = string.sub(head, 1, 32)
  local mark = others and '+' or ''
  local rest = string.sub(head, 49)
  local lettered = string.byte(rest, 1) == 102  -- 'f': a waiter of this build
  if lettered then rest = string.sub(rest, 2) end
  local folded = lettered and info and not announce
  local gap = string.find(rest, ' ', 1, true)
  local ttl = gap and string.sub(rest, 1, gap - 1) or rest
  local message = next_token
  if #ttl <= 15 and string.find(ttl, '^[1-9]%d*$') then
    local f = mint(fence, false)
    local term = f and string.format('%.0f', f)
    local data = gap and string.sub(rest, gap + 1) or ''
    if f and folded then
      redis.call('SET', lease, lease_value(info, next_token, term, data) .. mark, 'PX', ttl)
    else
      redis.call('SET', lease, next_token .. mark, 'PX', ttl)
    end
    if f then
      if not folded then record(info, f, next_token, data, ttl, announce) end
      message = message .. ' ' .. term .. ' ' .. place
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

local ours = holds(current, token)
if ours and not marked(current) then
  ended(lease, info, announce, current)  -- nobody queued behind us
  return 1
end
if not ours then
  -- Not ours: a waiter that gives up leaves the queue. (A holder is never queued: the grant
  -- took its member out.)
  local member = token .. ARGV[2]
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZREM', KEYS[3], member)
  return 0
end
if hand_on(lease, KEYS[2], KEYS[3], KEYS[4], info, ARGV[3], announce) then
  return 1
end
ended(lease, info, announce, current)
return 1
