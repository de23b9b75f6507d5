-- KEYS: record due escalated
-- ARGV: key downstream_key fence min_age_ms
-- flags: allow-oom
-- The running attempt's outcome stayed unknown past the bound (its age by the store's
-- clock): an operator decides. Only its holder.
-- KEYS[1] the record, KEYS[2] its shard's due index, KEYS[3] its shard's escalated index
-- (zset: request key -> when); ARGV[1] the request key, ARGV[2] the downstream key, ARGV[3]
-- the fencing token, ARGV[4] the bound (ms). Words: done, refused, too_young.
-- (idem.lua)
local now = idem_now()
local r = idem_read(KEYS[1])
if not idem_ours(r, ARGV[2], ARGV[3]) then return idem_reply('refused', r, now) end
if now - tonumber(r.began) < tonumber(ARGV[4]) then return idem_reply('too_young', r, now) end
r.state = 'escalated'
redis.call('HSET', KEYS[1], 'state', r.state)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], now, ARGV[1])
return idem_reply('done', r, now)
