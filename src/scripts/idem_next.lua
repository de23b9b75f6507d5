-- KEYS: record due
-- ARGV: key downstream_key fence first_look_ms
-- The running attempt's downstream key is spent and nothing happened under any attempt: the
-- next attempt, under a new downstream key. Only the running attempt's holder.
-- KEYS[1] the record, KEYS[2] its shard's due index; ARGV[1] the request key, ARGV[2] the
-- attempt's downstream key, ARGV[3] the fencing token, ARGV[4] the first look's delay (ms).
-- Words: done, refused. The looks' count goes on (a new attempt after a failure is no reason to
-- ask a struggling downstream more often).
-- (idem.lua)
local now = idem_now()
local r = idem_read(KEYS[1])
if not idem_ours(r, ARGV[2], ARGV[3]) then return idem_reply('refused', r, now) end
r.attempt = string.format('%d', tonumber(r.attempt) + 1)
r.dkey, r.began = ARGV[1] .. '/' .. r.attempt, string.format('%d', now)
redis.call('HSET', KEYS[1], 'attempt', r.attempt, 'dkey', r.dkey, 'began', r.began)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[1])
return idem_reply('done', r, now)
