-- (first.lua)
-- KEYS: lease queue queue_expiry fence [info]
-- ARGV: token member_suffix notify [announce]
-- flags: allow-oom
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
-- A hand-off is set up in this one step (hand_on): a signed message grants it, another is
-- a nudge on which the waiter claims it.
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
-- (shared.lua)

local ours = holds(current, token)
if ours and not marked(current) then
  ended(lease, info, announce, current)  -- nobody queued behind us
  return 1
end
if not ours then
  -- Not ours: a waiter that gives up leaves the queue. (A holder is never queued: the grant
  -- took its member out.) The queue then lives as long as its latest place left, not as long
  -- as the place that left (a past expiry deletes it): once nobody waits, nothing stays
  -- behind that would keep the resource a mutex.
  local member = token .. ARGV[2]
  redis.call('ZREM', KEYS[2], member)
  if redis.call('ZREM', KEYS[3], member) == 1 then
    local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2]
    if last then
      redis.call('PEXPIREAT', KEYS[2], last)
      redis.call('PEXPIREAT', KEYS[3], last)
    end
  end
  return 0
end
if hand_on(lease, KEYS[2], KEYS[3], KEYS[4], info, ARGV[3], announce) then
  return 1
end
ended(lease, info, announce, current)
return 1
