-- KEYS: due
-- ARGV: limit claim_ms
-- flags: allow-oom
-- The reconciler's round on one shard: claims the request keys whose look is due by the
-- store's clock, oldest first, by moving each one's look ARGV[2] ms later (so that a key the
-- round cannot settle, held by a request or failing, lets the keys behind it through next
-- round, and two reconcilers do not look at the same key at once; the look's outcome then
-- sets its real time). KEYS[1] the shard's due index; ARGV[1] at most this many.
-- Returns {now, key, key, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]))
for _, key in ipairs(due) do redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), key) end
table.insert(due, 1, string.format('%d', now))
return due
