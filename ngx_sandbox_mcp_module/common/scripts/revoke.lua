-- Revoke one token by its id (smcp-token --revoke, make revoke): every
-- nginx worker refuses it from the moment the PUBLISH reaches it.
--
-- KEYS[1] revoked (hash: jti -> exp)   KEYS[2] channel revoked
-- ARGV: jti, its exp (unix seconds), now (unix seconds)
--
-- Entries already past their exp are dropped on the way; an existing entry
-- keeps the later exp.  Returns 1.

local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if (tonumber(all[i + 1]) or 0) <= tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
local old = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not old or old < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('PUBLISH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return 1
