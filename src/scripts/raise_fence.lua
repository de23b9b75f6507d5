-- KEYS: fence
-- ARGV: token
-- Redlock fencing: raise this node's fencing counter to a token minted from a majority's
-- counters (a max-register write), never lowering it.
-- KEYS[1] fencing counter; ARGV[1] the token. Returns the counter's value afterwards.
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
if current < token then
  redis.call('SET', KEYS[1], ARGV[1])
  return token
end
return current
