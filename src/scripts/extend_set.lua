-- Extend one hold of a lease set (acquire_set.lua) only if it is still ours and live: an
-- expired hold not yet purged is not revived.
-- KEYS[1] lease set; ARGV[1] holder (token .. mode), ARGV[2] new ttl ms.
-- Returns 1 if extended, else 0.
local now = now_ms()
local score = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
-- Not ours: gone, lapsed, or the key is another kind's now (WRONGTYPE).
if not score or type(score) == 'table' or tonumber(score) < now then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
