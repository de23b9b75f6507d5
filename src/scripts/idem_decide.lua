-- KEYS: record due escalated
-- ARGV: key fingerprint attempt downstream_key status body external_id retention_ms
-- flags: allow-oom
-- The downstream's answer for an attempt. Keyed, not fenced: recorded for its own attempt's
-- downstream key (whoever heard it), never for another attempt's, never over a decision.
-- KEYS[1] the record, KEYS[2] its shard's due index, KEYS[3] its escalated index; ARGV[1]
-- the request key, ARGV[2] the fingerprint, ARGV[3] the attempt, ARGV[4] its downstream key,
-- ARGV[5] status, ARGV[6] body, ARGV[7] external id, ARGV[8] retention (ms; 0: for good).
-- Words: recorded, already (the stored response stands), refused.
-- (idem.lua)
local now = idem_now()
local r = idem_read(KEYS[1])
if r.state == 'decided' then return idem_reply('already', r, now) end
if r.state == '' then
  -- the store lost the record (a failover, a restore): the answer rebuilds it
  r.fp, r.attempt, r.dkey = ARGV[2], ARGV[3], ARGV[4]
  redis.call('HSET', KEYS[1], 'fp', r.fp, 'attempt', r.attempt, 'dkey', r.dkey)
elseif r.dkey ~= ARGV[4] then
  return idem_reply('refused', r, now)
end
r.state, r.status, r.body, r.ext = 'decided', ARGV[5], ARGV[6], ARGV[7]
redis.call('HSET', KEYS[1], 'state', r.state, 'status', r.status, 'body', r.body, 'ext', r.ext)
redis.call('HDEL', KEYS[1], 'retries', 'payload')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if tonumber(ARGV[8]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[8]) end
return idem_reply('recorded', r, now)
