-- (first.lua)
-- KEYS: lease queue queue_expiry
-- ARGV: token member_suffix notify
-- flags: allow-oom
-- Give back one hold of a lease set (acquire_set.lua) if it is still ours, and hand what is
-- free to the queue's head: permits one per free permit, a read-write lock's readers queued
-- together all at once, its exclusive hold to a writer once nobody holds. Each waiter handed
-- a hold gets it for its own ttl, and its token alone published on its manager's channel (a
-- nudge: its claim, acquire_set.lua, mints the hold's fencing token). Also takes our own
-- member out of the queue: a waiter that gives up leaves this way.
-- KEYS[1] lease set, KEYS[2] queue, KEYS[3] queue expiry (one slot); ARGV[1] token, ARGV[2]
-- our member suffix: a holder's is its manager id (16) and mode, a waiter's goes on with its
-- ttl; ARGV[3] '<P|S><channel prefix>'. Returns 1 if the hold was ours and live, else 0.
local lease, queue, expiry = KEYS[1], KEYS[2], KEYS[3]
local token = ARGV[1]
local suffix = ARGV[2]
local queued = redis.call('EXISTS', queue) == 1
if queued and #suffix > 17 then  -- a waiter's member (a holder's suffix is id and mode alone:
  redis.call('ZREM', queue, token .. suffix)  -- a holder is never queued, its grant took it
  if redis.call('ZREM', expiry, token .. suffix) == 1 then  -- out)
    -- The queue lives as long as its latest place left, not the one that left (a past
    -- expiry deletes it), and the key no longer for it (fit_lease_set, below).
    local last = redis.call('ZRANGE', expiry, -1, -1, 'WITHSCORES')[2]
    if last then
      redis.call('PEXPIREAT', queue, last)
      redis.call('PEXPIREAT', expiry, last)
    end
    queued = redis.call('EXISTS', queue) == 1
  end
end
local now = now_ms()
local holder = token .. string.sub(suffix, 17, 17)
local score = redis.pcall('ZSCORE', lease, holder)
if type(score) == 'table' then return 0 end  -- WRONGTYPE: it lapsed and became a mutex
local ours = false
if score then
  ours = tonumber(score) >= now
  redis.call('ZREM', lease, holder)
end
redis.call('ZREMRANGEBYSCORE', lease, '-inf', '(' .. now)
-- What is left: the kind's marker (scored +inf, there while anything is) and the live holds.
local left = redis.call('ZCARD', lease)
-- Whether anyone may still wait: known exactly where the loop below saw the queue's first
-- (or its end), asked (EXISTS) only where it did not look.
local waiting = queued
if left > 0 and queued then
-- (shared.lua)
  local kind = redis.call('ZRANGE', lease, -1, -1)[1]
  local limit = string.byte(kind, 2) == 83 and tonumber(string.sub(kind, 3)) or math.huge
  local count = left - 1
  local exclusive = count == 1 and string.byte(redis.call('ZRANGE', lease, 0, 0)[1], 33) == 120
  local how = ARGV[3]
  local purged, looked = false, false
  for _ = 1, 256 do
    if exclusive then break end
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    looked = true
    if not head then
      waiting = false
      break
    end
    local mode = string.sub(head, 49, 49)
    if (mode == 'x' and count > 0) or (mode ~= 'x' and count >= limit) then break end
    local place = redis.call('ZSCORE', expiry, head)
    if lapsed(place, now) then
      -- The first in line died (or its place is lost): the queue's dead go, once a call,
      -- and the new first is looked at. (A live first is served without this purge: the
      -- dead further back go when they reach the front.) More lapsed places than one purge
      -- removes: nobody is served.
      if purged then break end
      purged = true
      now = drop_dead_waiters(queue, expiry)
    else
      redis.call('ZREM', queue, head)
      redis.call('ZREM', expiry, head)
      looked = false
      local ttl = string.sub(head, 50)
      if #ttl <= 15 and string.find(ttl, '^[1-9]%d*$') then
        local next_token = string.sub(head, 1, 32)
        redis.call('ZADD', lease, now + tonumber(ttl), next_token .. mode)
        -- The message is the token alone, a nudge: the waiter's claim (acquire_set.lua)
        -- mints the hold's token, and its reply, not this message, grants it.
        publish(how, string.sub(head, 33, 48), next_token)
        count = count + 1
        exclusive = mode == 'x'
      end
    end
  end
  left = count + 1  -- the holds and the marker
  if waiting and not looked then waiting = redis.call('EXISTS', queue) == 1 end
end
-- The marker alone, and nobody waits: idle. Otherwise the key lasts as long as what is
-- left (our hold may have been the longest, and the holds handed on are in it now). (Without
-- a queue at the start, none came.)
if left == 1 and not waiting then
  redis.call('DEL', lease)
elseif left > 0 then
  fit_lease_set(lease, waiting and queue)
end
if ours then return 1 end
return 0
