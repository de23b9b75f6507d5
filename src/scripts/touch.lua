-- KEYS: lease info
-- ARGV: token label
-- Replace the holder label recorded with a mutex's lease (LockGuard::async_touch) if the lease
-- still holds `token`, keeping its expiry and its fencing token: the data up to its first
-- newline (an election's value after it stays). The record is folded into the lease, or
-- beside it in the info key (first.lua's lease_value); a bare lease with no record of its
-- token's (Redlock's) records no label. Returns 1 if the lease is ours (its label replaced
-- wherever its holding keeps one), else 0.
-- (pcall: a key that lapsed and became another kind of lock is not ours; no WRONGTYPE.)
local lease, info, token, label = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local current = redis.pcall('GET', lease)
if type(current) ~= 'string' or string.sub(current, 1, 32) ~= token then return 0 end

local function relabel(data)
  local newline = string.find(data, '\n', 1, true)
  return newline and (label .. string.sub(data, newline)) or label
end

local after = string.byte(current, 33)
if after == 32 then  -- '<token> <data>@<fencing token>', then '+' maybe
  local data, tail = string.match(current, '^(.*)(@%d+%+?)$', 34)
  if not data then return redis.error_reply('ERR the lease holds no fencing token') end
  redis.call('SET', lease, token .. ' ' .. relabel(data) .. tail, 'KEEPTTL')
  return 1
end
if after and (after ~= 43 or #current ~= 33) then return 0 end  -- not '<token>' nor '<token>+'
local record = redis.call('GET', info)  -- '<fencing token>@<token> <data>'
local head, data = string.match(record or '', '^(%d+@' .. token .. ' )(.*)$')
if head then redis.call('SET', info, head .. relabel(data), 'KEEPTTL') end
return 1
