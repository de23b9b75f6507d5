-- KEYS: shards
-- ARGV: count
-- flags: allow-oom
-- How many shards the store's records are spread over: set by the first client, read by
-- every other (a client with another number would look for each record in the wrong place).
-- KEYS[1] <prefix>idem:shards; ARGV[1] this client's number. Returns the store's.
local stored = redis.call('GET', KEYS[1])
if stored then return stored end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
