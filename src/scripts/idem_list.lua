-- KEYS: index
-- ARGV: limit
-- flags: no-writes
-- An index's keys, oldest first: KEYS[1] a shard's escalated (or due) index; ARGV[1] at most
-- this many. Returns {now, key, key, ...}. Writes nothing.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local keys = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
table.insert(keys, 1, string.format('%d', now))
return keys
