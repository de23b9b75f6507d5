-- (first.lua)
-- Take one hold of a lease set, a semaphore's permit or a read-write lock's shared or
-- exclusive hold, and mint its fencing token in one atomic step, fairly: waiters queued
-- before us come first.
-- A lease set lives at the lease key, as a zset: each holder is `token .. mode` ('s' a
-- permit or a shared hold, 'x' the exclusive hold) scored with its lease's expiry on the
-- server's clock (ms); and the kind's marker, scored +inf: '#S<limit>' (a semaphore) or '#RW'
-- (a read-write lock). The key itself expires with its last live lease (shared.lua's
-- fit_lease_set), and lives as long as its queue. A mutex's lease is a
-- string at the same key, so each command on it fails with WRONGTYPE here, and ours there.
-- KEYS: lease fence queue queue_expiry mutex_queue
-- ARGV: token ttl_ms mode place_ms member_suffix marker
-- (script_table.hpp's AcquireSet) The queue and its expiry are the lease sets' own
-- (keys.cpp), mutex_queue a mutex's queue of the same resource; mode ('0' or '1'), place_ms
-- and member_suffix as for acquire.lua, the suffix being manager id (16), mode, ttl.
-- The kind and limit are the resource's while anyone holds or waits (the marker stays while
-- the queue does): an acquire that asks for another kind fails with WRONGTYPE, for another
-- limit with LIMITMISMATCH; an idle resource takes whatever the next acquire asks for. A
-- mutex's waiters keep it a mutex the same way (its lease may have lapsed meanwhile).
-- A shared hold (a permit) is taken when no exclusive hold is, fewer than the limit are
-- (none for a read-write lock), and every waiter queued ahead is a shared one that would fit
-- too: readers queued together go in together. The exclusive hold needs nobody holding and
-- nobody ahead. Replies as acquire.lua's: {1, fencing token}; {0, ms} not taken, ms until
-- the first lease ends (-2: only waiters ahead stand in the way); {0, ms, place} queued.
local lease, fence, queue, expiry = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, joins, place_ms = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local suffix, marker = ARGV[5], ARGV[6]
local now = now_ms()
-- First, before any write: WRONGTYPE on a mutex's lease.
redis.call('ZREMRANGEBYSCORE', lease, '-inf', '(' .. now)
local queued = redis.call('EXISTS', queue) == 1
if queued then
-- (shared.lua)
  drop_dead_waiters(queue, expiry)
  queued = redis.call('EXISTS', queue) == 1
end
local kind = redis.call('ZRANGE', lease, -1, -1)[1]
if not kind and redis.call('EXISTS', KEYS[5]) == 1 then
  return redis.error_reply('WRONGTYPE the resource is a mutex')
end
local count = kind and redis.call('ZCARD', lease) - 1 or 0
if kind and kind ~= marker then
  if count > 0 or queued then
    if string.sub(kind, 1, 2) == '#S' and string.sub(marker, 1, 2) == '#S' then
      return redis.error_reply('LIMITMISMATCH the semaphore is held with limit ' ..
                               string.sub(kind, 3) .. ', not ' .. string.sub(marker, 3))
    end
    return redis.error_reply('WRONGTYPE the resource is a ' ..
                             (kind == '#RW' and 'read-write lock' or 'semaphore'))
  end
  redis.call('DEL', lease)  -- idle: it becomes what this acquire asks for
  kind = nil
end
local mode = string.sub(suffix, 17, 17)
local member = token .. suffix
local holder = token .. mode

-- A hold a release handed to us (we claim it: its message was lost, or min_replicas).
local admit = redis.call('ZSCORE', lease, holder) ~= false
if not admit then
  local ahead = 0
  if queued then ahead = redis.call('ZRANK', queue, member) or -1 end  -- -1: behind them all
  if ahead >= 0 then
    if mode == 'x' then
      admit = count == 0 and ahead == 0
    else
      local limit = string.byte(marker, 2) == 83 and tonumber(string.sub(marker, 3)) or math.huge
      local exclusive = count == 1 and
                        string.byte(redis.call('ZRANGE', lease, 0, 0)[1], 33) == 120
      admit = not exclusive and count + ahead < limit
      if admit and ahead > 0 and limit == math.huge then  -- a semaphore queues no writer
        for _, m in ipairs(redis.call('ZRANGE', queue, 0, ahead - 1)) do
          if string.byte(m, 49) == 120 then admit = false break end
        end
      end
    end
  end
end

if admit then
  if queued then
    redis.call('ZREM', queue, member)
    redis.call('ZREM', expiry, member)
  end
  if not kind then redis.call('ZADD', lease, '+inf', marker) end
  redis.call('ZADD', lease, now + ttl, holder)
  -- The key as long as its longest live hold and its queue, no longer: while we waited it
  -- lived as long as our place, which may outlast the hold we take now.
  fit_lease_set(lease, queued and queue)
  local f, err = mint(fence, false)
  if not f then
    redis.call('ZREM', lease, holder)  -- never keep a hold whose fencing token failed
    if redis.call('ZCARD', lease) == 1 and redis.call('EXISTS', queue) == 0 then
      redis.call('DEL', lease)
    else
      fit_lease_set(lease, queue)
    end
    return err
  end
  return {1, f}
end

local left = -2
if count > 0 then left = tonumber(redis.call('ZRANGE', lease, 0, 0, 'WITHSCORES')[2]) - now end
if joins ~= '1' then
  return {0, left}
end
if not redis.call('ZSCORE', queue, member) then
  local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
  local seq = last[2] and (tonumber(last[2]) + 1) or 1
  redis.call('ZADD', queue, seq, member)
end
local place = now + tonumber(place_ms)
redis.call('ZADD', expiry, place, member)
redis.call('PEXPIRE', queue, place_ms)
redis.call('PEXPIRE', expiry, place_ms)
-- The marker lives as long as the queue: the resource keeps its kind and limit for its
-- waiters when every hold has lapsed.
if not kind then redis.call('ZADD', lease, '+inf', marker) end
if redis.call('PTTL', lease) < tonumber(place_ms) then redis.call('PEXPIRE', lease, place_ms) end
return {0, left, place}
