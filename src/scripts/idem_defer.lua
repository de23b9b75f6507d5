-- KEYS: record due
-- ARGV: key downstream_key fence base_ms cap_ms
-- flags: allow-oom
-- The running attempt's outcome is still unknown: its next look, later each time (base,
-- 2 base, 4 base ... up to cap). Only its holder.
-- KEYS[1] the record, KEYS[2] its shard's due index; ARGV[1] the request key, ARGV[2] the
-- downstream key, ARGV[3] the fencing token, ARGV[4] base (ms), ARGV[5] cap (ms).
-- Words: done (extra: the look's time, the store's clock), refused.
-- (idem.lua)
local now = idem_now()
local r = idem_read(KEYS[1])
if not idem_ours(r, ARGV[2], ARGV[3]) then return idem_reply('refused', r, now) end
local retries = (tonumber(r.retries) or 0) + 1
r.retries = string.format('%d', retries)
local at = now + math.min(tonumber(ARGV[4]) * 2 ^ math.min(retries - 1, 40), tonumber(ARGV[5]))
redis.call('HSET', KEYS[1], 'retries', r.retries)
redis.call('ZADD', KEYS[2], at, ARGV[1])
return idem_reply('done', r, now, string.format('%d', at))
