-- Take the lease and mint a fencing token in one atomic step.
-- KEYS[1] lease key, KEYS[2] fencing counter (same hash slot); ARGV[1] token, ARGV[2] ttl ms.
-- Returns {1, fencing_token} when taken, {0, pttl} when held by someone else.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err then
    -- Never keep a lease whose fencing token could not be minted.
    redis.call('DEL', KEYS[1])
    return fence
  end
  return {1, fence}
end
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
return {0, redis.call('PTTL', KEYS[1])}
