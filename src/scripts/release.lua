-- Delete the lease only if it still holds our token, then tell waiters it is free.
-- KEYS[1] lease key; ARGV[1] token, ARGV[2] release channel. Returns 1 if deleted, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
