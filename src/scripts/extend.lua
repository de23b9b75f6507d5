-- Extend the lease only if it still holds our token (with or without the waiters' '+').
-- KEYS[1] lease key, KEYS[2] its info (none on Redlock); ARGV[1] token, ARGV[2] new ttl ms,
-- ARGV[3] (an election's leader only) '<P|S><channel>': the observers hear
-- '<fencing token> <ttl ms> <data>' (shared.lua's record). Returns 1 if extended, else 0.
-- (pcall: a key that lapsed and became another kind of lock is not ours; no WRONGTYPE.)
local current = redis.pcall('GET', KEYS[1])
if current ~= ARGV[1] and current ~= ARGV[1] .. '+' then return 0 end
local info = KEYS[2]
if info then redis.call('PEXPIRE', info, ARGV[2]) end
if info and ARGV[3] then
  -- The record is '<fencing token>@<lease token> <data>' (shared.lua's record); the
  -- observers hear '<fencing token> <ttl ms> <data>'.
  local text = redis.call('GET', info)
  local term = text and string.match(text, '^%d+')
  local gap = text and string.find(text, ' ', 1, true)
  if term and gap then
    local command = string.byte(ARGV[3], 1) == 83 and 'SPUBLISH' or 'PUBLISH'
    redis.call(command, string.sub(ARGV[3], 2), term .. ' ' .. ARGV[2] .. string.sub(text, gap))
  end
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
