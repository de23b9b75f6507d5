-- (first.lua)
-- KEYS: fence (lease queue info)...
-- ARGV: token ttl_ms data
-- Take several mutexes of one slot all at once, or none: the uncontended path of
-- async_acquire_all. Taken only when every lease is free and nobody queues for it, so it
-- never overtakes a waiter; otherwise nothing is written, and the caller takes them one by
-- one in their order with acquire.lua (which waits fairly).
-- KEYS[1] fencing counter, then each resource's lease, queue and info (acquire.lua's keys);
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] the data each lease records (the holder's label).
-- Returns {1, fencing token of each lease in KEYS' order} when taken, {0, i} when the i-th
-- resource is held or waited for.
local n = (#KEYS - 1) / 3
for i = 1, n do
  if redis.call('EXISTS', KEYS[3 * i]) == 1 or redis.call('EXISTS', KEYS[3 * i - 1]) == 1 then
    return {0, i}
  end
end
local reply = {1}
for i = 1, n do
  local f, err = mint(KEYS[1], false)
  if not f then
    for j = 1, i - 1 do redis.call('DEL', KEYS[3 * j - 1]) end
    return err
  end
  local term = string.format('%.0f', f)
  redis.call('SET', KEYS[3 * i - 1], lease_value(KEYS[3 * i + 1], ARGV[1], term, ARGV[3]), 'PX',
             ARGV[2])
  reply[i + 1] = f
end
return reply
