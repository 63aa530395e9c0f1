-- The revoked token ids for an nginx worker to hold in memory (on every
-- connect, and again while its copy cannot hold them all): first up to
-- ARGV[3] entries already past their exp are dropped, then the hash is
-- read whole, unless more than ARGV[2] entries remain (the worker keeps
-- asking Redis for each token then).
--
-- KEYS[1] revoked (hash: jti -> exp)   KEYS[2] revoked:exp (zset)
-- ARGV: now (unix seconds), the most ids a worker holds, the most
-- expired entries to drop now
--
-- Returns the hash as HGETALL does (jti, exp, ...), or the number of its
-- entries (an integer) when there are more than the worker holds.
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1],
                       'LIMIT', 0, tonumber(ARGV[3]))
if #old > 0 then
  redis.call('HDEL', KEYS[1], unpack(old))
  redis.call('ZREM', KEYS[2], unpack(old))
end
local n = redis.call('HLEN', KEYS[1])
if n > tonumber(ARGV[2]) then
  return n
end
return redis.call('HGETALL', KEYS[1])
