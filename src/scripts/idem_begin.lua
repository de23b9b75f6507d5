-- KEYS: record due
-- ARGV: fingerprint key fence first_look_ms mode [payload]
-- A request under its key's lock: begins its first attempt, begins a void attempt again, or
-- resumes a running one (whose outcome is unknown: the caller resolves it before sending).
-- KEYS[1] the record, KEYS[2] its shard's due index (zset: request key -> when the
-- reconciler looks); ARGV[1] the fingerprint ('' with ARGV[5] = 'resume'), ARGV[2] the
-- request key, ARGV[3] the fencing token, ARGV[4] the first look's delay (ms), ARGV[5]
-- 'run' (a request) or 'resume' / 'resend' (the reconciler: never creates, takes any
-- fingerprint; 'resend' also answers the kept payload), ARGV[6] (a request, optional) its
-- payload, kept while the request is undecided.
-- Words: created, restarted, resumed, replay, escalated, mismatch, stale; with 'resume'
-- also none (no record: its index entry goes) and void (nothing to look at: likewise).
-- (idem.lua)
local now = idem_now()
local r = idem_read(KEYS[1])
local resume = ARGV[5] == 'resume' or ARGV[5] == 'resend'
if resume and (r.state == '' or r.state == 'void') then
  redis.call('ZREM', KEYS[2], ARGV[2])
  return idem_reply(r.state == '' and 'none' or 'void', r, now)
end
if r.state ~= '' and not resume and r.fp ~= ARGV[1] then return idem_reply('mismatch', r, now) end
if r.state == 'decided' then return idem_reply('replay', r, now) end
if r.state == 'escalated' then return idem_reply('escalated', r, now) end
if r.state ~= '' and idem_below(ARGV[3], r.fence) then return idem_reply('stale', r, now) end
local word
if r.state == '' then
  r = {state = 'running', fp = ARGV[1], attempt = '1', dkey = ARGV[2] .. '/1', fence = ARGV[3],
       began = string.format('%d', now), status = '', body = '', ext = '', retries = '0'}
  redis.call('HSET', KEYS[1], 'state', r.state, 'fp', r.fp, 'attempt', r.attempt, 'dkey', r.dkey,
             'fence', r.fence, 'began', r.began, 'retries', r.retries)
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[2])
  word = 'created'
elseif r.state == 'void' then
  r.state, r.fence, r.began = 'running', ARGV[3], string.format('%d', now)
  r.retries = '0'
  redis.call('HSET', KEYS[1], 'state', r.state, 'fence', r.fence, 'began', r.began, 'retries', '0')
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[2])
  word = 'restarted'
else
  -- running: only the holder moves (the attempt's age and its look stay)
  r.fence = ARGV[3]
  redis.call('HSET', KEYS[1], 'fence', r.fence)
  word = 'resumed'
end
if ARGV[6] then
  redis.call('HSET', KEYS[1], 'payload', ARGV[6])
elseif ARGV[5] == 'resend' then
  local kept = redis.call('HGET', KEYS[1], 'payload')
  if kept then r.payload = '+' .. kept end
end
return idem_reply(word, r, now)
