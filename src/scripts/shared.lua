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
-- after the 'f' there, or after the 'g' and the secret, up to a space), its fencing token
-- minted, its record written (the member's data follows that space) and '<token> <fencing
-- token> <place>' published on its manager's channel (`how`: '<P|S><channel prefix>', the
-- manager id completing it), place being the queue entry's expiry as the waiter's last
-- refresh left it. An unsigned message is a wake-up: the waiter claims the lease with an
-- attempt, whose reply (not the message) grants it. A waiter of this build ('f' after its manager id) gets the record folded into
-- the lease (first.lua's lease_value), which its claim keeps as it is; a waiter of the
-- build before (digits there), and an election's candidate, get it beside the lease in the
-- info key, the form they claim. A waiter with a secret ('g', then 32 hex digits, then its
-- ttl) gets the folded lease and a signed message, '<token> <fencing token> <place> <mac>',
-- which grants it the lease with no claim (AcquireFsm::handed): only the server's keys and
-- the waiter know the secret, so a publisher without key access cannot sign a message.
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
  local letter = string.byte(rest, 1)
  local lettered = letter == 102 or letter == 103  -- 'f', 'g': a waiter of these builds
  local secret  -- 'g': its 32-digit secret follows
  if letter == 103 then
    secret = string.sub(rest, 2, 33)
    rest = string.sub(rest, 34)
  elseif lettered then
    rest = string.sub(rest, 2)
  end
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
      if secret and folded then
        -- Signed with the waiter's secret (nested, HMAC-shaped: a digest of the secret and
        -- the digest of the secret and the message, never a bare prefix hash), the message
        -- is the grant: the waiter owns the lock on it, without a claim.
        message = message .. ' ' ..
                  redis.sha1hex(secret .. redis.sha1hex(secret .. '\n' .. message))
      end
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
