-- Extend the lease only if it still holds our token.
-- KEYS[1] lease key; ARGV[1] token, ARGV[2] new ttl ms. Returns 1 if extended, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
