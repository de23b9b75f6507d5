-- KEYS: record
-- ARGV:
-- flags: no-writes
-- A request's record, read without the key's lock (a decided one is replayed from it).
-- KEYS[1] the record. Writes nothing (runs wherever a read does). Its payload is not sent,
-- only whether one is kept ('+' alone); extra: the record's PTTL (-1: kept for good).
-- (idem.lua)
local now = idem_now()
local r = idem_read(KEYS[1])
if redis.call('HEXISTS', KEYS[1], 'payload') == 1 then r.payload = '+' end
return idem_reply('look', r, now, string.format('%d', redis.call('PTTL', KEYS[1])))
