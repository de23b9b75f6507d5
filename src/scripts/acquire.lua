-- (first.lua)
-- Take the lease and mint a fencing token in one atomic step, fairly: waiters queued before
-- us come first, and a lease handed over to us by a release is ours to claim.
-- KEYS: lease fence queue queue_expiry [info]
-- ARGV: token ttl_ms mode place_ms member_suffix [announce]
-- (script_table.hpp's Acquire) The fencing counter is of the lease's slot; the queue is a zset
-- member -> arrival, its expiry a zset member -> ms; info is the lease's record (the record of
-- a lease handed over, and a leader's: first.lua's lease_value; none on Redlock). token: 32
-- hex digits; mode: '1' joins the queue when held, '2' too, sent after a hand-off message
-- (the lease is likely ours to claim: read first), '0' does not join, 'R' does not and
-- floors only a fresh counter (Redlock, see mint); place_ms: how long a queued waiter keeps
-- its place without retrying; member_suffix: the waiter's manager id (16 hex digits: its
-- notify channel) and its ttl in ms (for a lease handed to it), then optionally a space and
-- the data recorded with the lease when it is its (the holder's label, and an election's
-- value); announce (an election's candidate only): '<P|S><channel>' on which a new leader
-- is announced. A queue member is token .. member suffix.
-- The lease's value is its holder's token and record (first.lua's lease_value), followed by '+'
-- once a waiter may be queued behind it: the release's GET then says whether it must look
-- at the queue at all.
-- Returns {1, fencing_token} when taken; {0, pttl} when not (pttl -2: free but reserved),
-- and {0, pttl, place} when queued, place being the entry's expiry (a release that hands
-- the lease to this waiter tells it which of its refreshes it saw by that number).
local lease, fence, queue, expiry, info = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, ttl, mode, place_ms, suffix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local announce = ARGV[6]

-- What the holder records: the data after the member suffix's space.
local function data()
  local gap = string.find(suffix, ' ', 1, true)
  return gap and string.sub(suffix, gap + 1) or ''
end

-- Mints our fencing token and writes our lease with it ('+' after it when `mark`): returns
-- the token, or nil and the error. An election's candidate keeps its record beside the lease
-- (first.lua): the observers of older builds read the leader there (grant writes it).
local function take(mark)
  local f, err = mint(fence, mode == 'R')
  if not f then
    redis.call('DEL', lease)  -- never keep a lease whose fencing token could not be minted
    return nil, err
  end
  local term = string.format('%.0f', f)
  redis.call('SET', lease, lease_value(not announce and info, token, term, data()) .. mark, 'PX',
             ttl)
  return f
end

-- A claim, after a hand-off message: the lease a release folded our token and record into
-- (hand_on) is renewed for our ttl, after one read. (Anything else goes the usual way.)
if mode == '2' then
  local current = redis.call('GET', lease)  -- WRONGTYPE: another kind's key
  if current and string.sub(current, 1, 32) == token and string.byte(current, 33) == 32 then
    local term = string.match(current, '@(%d+)%+?$', 34)
    if term then
      redis.call('PEXPIRE', lease, ttl)
      return {1, tonumber(term)}
    end
  end
end

-- One read when the resource is free and nobody waits (the common case); the lease's value
-- only when something is there.
local present = redis.call('EXISTS', lease, queue)
local current = present > 0 and redis.call('GET', lease)  -- WRONGTYPE: another kind's key
local queued = present > (current and 1 or 0)
if present == 0 and not announce then
  local f, err = take('')  -- the common, uncontended path
  if not f then return err end
  return {1, f}
end
-- (shared.lua)

-- take, then an election's record and announcement, and the reply.
local function grant(mark)
  local f, err = take(mark)
  if not f then return err end
  if announce then record(info, f, token, data(), ttl, announce) end
  return {1, f}
end

if not queued and not current then return grant('') end  -- a candidate's
local member = token .. suffix
local ours = holds(current, token)  -- handed over to us by a release (or our own, resent)
-- Only a free lease asks who is first, so only then are the queue's dead purged first (a
-- release that hands the lease on purges them too): a claim, and a waiter that joins or
-- keeps its place behind a holder, leave them.
local now, head
if queued and not current then now, head = drop_dead_waiters(queue, expiry) end
local head_is_us = not current and (not head or head == member)
if head_is_us then
  local others = false
  if queued then
    redis.call('ZREM', queue, member)
    redis.call('ZREM', expiry, member)
    others = redis.call('EXISTS', queue) == 1
  end
  return grant(others and '+' or '')
end
if ours then
  -- Our member is not queued: the release that handed the lease to us took it out (every
  -- build's does), as our own grant did (a resent attempt), and that release marked the
  -- lease if others were left; a waiter that queued since marked it too.
  local mark = marked(current) and '+' or ''
  -- The release that handed it to us minted our token and recorded it beside our lease
  -- token (an election's observers heard it as the term): keep that one, so that one
  -- holding has one token. A record of another lease's (an older client's hand-off records
  -- none and leaves the last holder's) is not ours: mint. The record lives and dies with
  -- the holding it names, and every grant on this resource writes or deletes it, so no
  -- token was minted here since. The claim folds the record into the lease.
  local term = folded_term(current)
  if term then  -- already folded: our own attempt, resent
    redis.call('PEXPIRE', lease, ttl)
    return {1, tonumber(term)}
  end
  if not info then return grant(mark) end  -- Redlock: no record, a claim mints
  local text = redis.call('GET', info)
  term = text and string.match(text, '^(%d+)@' .. token .. ' ')
  if announce then  -- an election's candidate: the record stays beside the lease (take)
    if not term then return grant(mark) end
    redis.call('PEXPIRE', lease, ttl)
    redis.call('PEXPIRE', info, ttl)
    return {1, tonumber(term)}
  end
  if text then redis.call('DEL', info) end
  if not term then return grant(mark) end
  redis.call('SET', lease, lease_value(info, token, term, data()) .. mark, 'PX', ttl)
  return {1, tonumber(term)}
end
if mode ~= '1' and mode ~= '2' then
  return {0, redis.call('PTTL', lease)}
end
if not queued then
  redis.call('ZADD', queue, 1, member)  -- the first in line
elseif not redis.call('ZSCORE', queue, member) then
  local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
  local seq = last[2] and (tonumber(last[2]) + 1) or 1
  redis.call('ZADD', queue, seq, member)
end
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
