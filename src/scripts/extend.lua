-- Extend the lease only if it still holds our token (with or without the waiters' '+').
-- KEYS[1] lease key; ARGV[1] token, ARGV[2] new ttl ms. Returns 1 if extended, else 0.
-- (pcall: a key that lapsed and became another kind of lock is not ours; no WRONGTYPE.)
local current = redis.pcall('GET', KEYS[1])
if current == ARGV[1] or current == ARGV[1] .. '+' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
