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
