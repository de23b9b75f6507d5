-- (first.lua)
-- KEYS: lease
-- ARGV: holder ttl_ms place_ms
-- flags: allow-oom
-- Extend one hold of a lease set (acquire_set.lua) only if it is still ours and live: an
-- expired hold not yet purged is not revived.
-- The key then lasts as long as its longest live hold and a queue place's life at most
-- beyond (an extension down may shorten it: first.lua's fit_lease_set).
-- KEYS[1] lease set (the one key: see fit_lease_set); ARGV[1] holder (token .. mode),
-- ARGV[2] new ttl ms, ARGV[3] a queue place's life in ms.
-- Returns 1 if extended, else 0.
local now = now_ms()
local score = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
-- Not ours: gone, lapsed, or the key is another kind's now (WRONGTYPE).
if not score or type(score) == 'table' or tonumber(score) < now then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
fit_lease_set(KEYS[1], nil, ARGV[3])
return 1
