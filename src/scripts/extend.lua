-- KEYS: lease [info]
-- ARGV: token ttl_ms [announce]
-- flags: allow-oom
-- Extend the lease only if it still holds our token (with or without the waiters' '+').
-- KEYS[1] lease key, KEYS[2] its info (an election's leader only); ARGV[1] token, ARGV[2] new
-- ttl ms, ARGV[3] (an election's leader only) '<P|S><channel>': the observers hear
-- '<fencing token> <ttl ms> <data>'. Returns 1 if extended, else 0.
-- The lease holds '<token> <data>@<fencing token>', or (on Redlock, a leader's, or handed
-- over and not yet claimed) '<token>' with the record '<fencing token>@<token> <data>' in the
-- info key (none on Redlock); then '+' when a waiter may be queued (first.lua's lease_value,
-- whose holds() this check is: neither is put before this script). A leader's lease is never
-- folded, so only the record beside it is renewed and announced.
-- (pcall: a key that lapsed and became another kind of lock is not ours; no WRONGTYPE.)
local current = redis.pcall('GET', KEYS[1])
if type(current) ~= 'string' or string.sub(current, 1, 32) ~= ARGV[1] then return 0 end
local after = string.byte(current, 33)
if not (after == 32 or not after or (after == 43 and #current == 33)) then return 0 end
local info = KEYS[2]
if info and after ~= 32 then
  redis.call('PEXPIRE', info, ARGV[2])
  local text = ARGV[3] and redis.call('GET', info)
  local term = text and string.match(text, '^%d+')
  local gap = text and string.find(text, ' ', 1, true)
  if term and gap then
    local command = string.byte(ARGV[3], 1) == 83 and 'SPUBLISH' or 'PUBLISH'
    redis.call(command, string.sub(ARGV[3], 2), term .. ' ' .. ARGV[2] .. string.sub(text, gap))
  end
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
