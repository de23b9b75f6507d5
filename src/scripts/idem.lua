-- The idempotent requests' record (docs/design/idempotency.md; its table in C++ is
-- src/idempotency_record.cpp, which these scripts follow row by row). One hash per request
-- key: state ('running', 'void', 'decided', 'escalated'; no hash: none), fp, attempt, dkey
-- (the attempt's downstream key, '<key>/<attempt>'), fence (the fencing token that began or
-- resumed it, decimal), began (the store's clock, ms), status, body, ext, retries (the looks
-- that found the attempt's outcome unknown), payload (the request's bytes, kept while it is
-- undecided when the caller gave them: what the reconciler resends). Every script answers
-- {word, state, fp, attempt, dkey, fence, began, status, body, ext, now, extra, retries,
-- payload}: its reply word and the record after it, all as strings ('' for none); payload
-- only from a reconciler's begin, '+' followed by the bytes when one is kept.
local idem_fields = {'state', 'fp', 'attempt', 'dkey', 'fence', 'began', 'status', 'body', 'ext',
                     'retries'}
local function idem_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function idem_read(key)
  local v = redis.call('HMGET', key, unpack(idem_fields))
  local r = {}
  for i, name in ipairs(idem_fields) do r[name] = v[i] or '' end
  return r
end
local function idem_reply(word, r, now, extra)
  return {word, r.state, r.fp, r.attempt, r.dkey, r.fence, r.began, r.status, r.body, r.ext,
          string.format('%d', now), extra or '', r.retries, r.payload or ''}
end
-- a < b for decimal texts without leading zeros (fencing tokens: up to 20 digits, past what a
-- Lua number holds exactly)
local function idem_below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
-- The holder that began or resumed this very attempt, while it runs.
local function idem_ours(r, dkey, fence)
  return r.state == 'running' and r.dkey == dkey and r.fence == fence
end
