-- KEYS: record escalated
-- ARGV: key
-- flags: allow-oom
-- An operator's word on an escalated request: nothing happened under any attempt. It is
-- reopened as the next attempt, void, under a downstream key never sent: the next request
-- sends it. KEYS[1] the record, KEYS[2] its shard's escalated index; ARGV[1] the request key.
-- Words: done, refused (not escalated).
-- (idem.lua)
local now = idem_now()
local r = idem_read(KEYS[1])
if r.state ~= 'escalated' then return idem_reply('refused', r, now) end
r.attempt = string.format('%d', tonumber(r.attempt) + 1)
r.state, r.dkey, r.retries = 'void', ARGV[1] .. '/' .. r.attempt, '0'
redis.call('HSET', KEYS[1], 'state', r.state, 'attempt', r.attempt, 'dkey', r.dkey, 'retries',
           r.retries)
redis.call('HDEL', KEYS[1], 'payload')  -- the next request sends its own
redis.call('ZREM', KEYS[2], ARGV[1])
return idem_reply('done', r, now)
