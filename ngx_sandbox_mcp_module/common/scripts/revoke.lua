-- Revoke one token by its id (smcp-token --revoke, make revoke; the
-- authorization server's /oauth/revoke): every nginx worker refuses it
-- from the moment the PUBLISH reaches it.
--
-- KEYS[1] revoked (hash: jti -> exp)   KEYS[2] revoked:exp (zset: the
-- same ids by exp, to drop them once expired)   KEYS[3] channel revoked
-- KEYS[4] (/oauth/revoke only) the tenant's revocations this minute
-- (string: a counter)
-- ARGV: jti, its exp (unix seconds), now (unix seconds); with KEYS[4]:
-- the new ids the tenant may revoke a window, the window (seconds)
--
-- A token already expired needs nothing: 1, nothing written.  An id
-- already revoked keeps the later exp (not counted again).  A new id
-- past the tenant's budget: -S (S: the seconds until the budget renews),
-- nothing written.  Else up to 64 entries already past their exp are
-- dropped on the way, the id stored and published: 1.
local jti, exp, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if exp <= now then
  return 1
end
local cur = tonumber(redis.call('HGET', KEYS[1], jti))
if cur and cur >= exp then
  redis.call('PUBLISH', KEYS[3], jti .. ' ' .. cur)
  return 1
end
if not cur and KEYS[4] then
  local spent = tonumber(redis.call('GET', KEYS[4])) or 0
  if spent >= tonumber(ARGV[4]) then
    return -math.max(1, redis.call('TTL', KEYS[4]))
  end
end
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 64)
if #old > 0 then
  redis.call('HDEL', KEYS[1], unpack(old))
  redis.call('ZREM', KEYS[2], unpack(old))
end
redis.call('HSET', KEYS[1], jti, exp)
redis.call('ZADD', KEYS[2], exp, jti)
if not cur and KEYS[4] then
  if redis.call('INCR', KEYS[4]) == 1 then
    redis.call('EXPIRE', KEYS[4], ARGV[5])
  end
end
redis.call('PUBLISH', KEYS[3], jti .. ' ' .. exp)
return 1
