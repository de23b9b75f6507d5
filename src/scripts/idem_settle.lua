-- KEYS: record escalated
-- ARGV: key status body external_id retention_ms
-- flags: allow-oom
-- An operator's word on an escalated request: it was decided (the effect was found
-- downstream). Nothing else moves an escalated record.
-- KEYS[1] the record, KEYS[2] its shard's escalated index; ARGV[1] the request key, ARGV[2]
-- status, ARGV[3] body, ARGV[4] external id, ARGV[5] retention (ms; 0: for good).
-- Words: done, refused (not escalated).
-- (idem.lua)
local now = idem_now()
local r = idem_read(KEYS[1])
if r.state ~= 'escalated' then return idem_reply('refused', r, now) end
r.state, r.status, r.body, r.ext = 'decided', ARGV[2], ARGV[3], ARGV[4]
redis.call('HSET', KEYS[1], 'state', r.state, 'status', r.status, 'body', r.body, 'ext', r.ext)
redis.call('HDEL', KEYS[1], 'retries', 'payload')
redis.call('ZREM', KEYS[2], ARGV[1])
if tonumber(ARGV[5]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
return idem_reply('done', r, now)
