-- The reconciler's round on one shard: the request keys whose look is due by the store's
-- clock, oldest first. KEYS[1] the shard's due index; ARGV[1] at most this many.
-- Returns {now, key, key, ...}. Writes nothing.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]))
table.insert(due, 1, string.format('%d', now))
return due
