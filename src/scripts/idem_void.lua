-- KEYS: record due
-- ARGV: key downstream_key fence
-- flags: allow-oom
-- The running attempt did not happen (its work said so, or a lookup found nothing under its
-- key): the next request begins it again. Only its holder (fencing token and key).
-- KEYS[1] the record, KEYS[2] its shard's due index; ARGV[1] the request key, ARGV[2] the
-- attempt's downstream key, ARGV[3] the fencing token. Words: done, refused.
-- (idem.lua)
local now = idem_now()
local r = idem_read(KEYS[1])
if not idem_ours(r, ARGV[2], ARGV[3]) then return idem_reply('refused', r, now) end
r.state = 'void'
redis.call('HSET', KEYS[1], 'state', r.state)
redis.call('HDEL', KEYS[1], 'payload')  -- the next request sends its own
redis.call('ZREM', KEYS[2], ARGV[1])
return idem_reply('done', r, now)
