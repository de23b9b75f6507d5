-- A request's record, read without the key's lock (a decided one is replayed from it).
-- KEYS[1] the record. Writes nothing (runs wherever a read does).
-- (idem.lua)
local now = idem_now()
return idem_reply('look', idem_read(KEYS[1]), now)
