-- A GitHub sign-in under way: the checked authorization request waits
-- for the user to come back from GitHub.  Anyone may start one, so they
-- count in the bounded set `signins` (member: the pending key, score: its
-- expiry); the callback takes the request with GETDEL, its member expires
-- with it.
--
-- KEYS[1] oauth:pending:{state}   KEYS[2] oauth:signins (zset)
-- ARGV: the request (JSON text), ttl (seconds), now (unix seconds), the
-- most sign-ins `signins` may hold
--
-- Returns 1; -S when `signins` is full (S: the seconds until its soonest
-- entry expires, at least 1; nothing written but the removal of expired
-- entries).
local now, ttl = tonumber(ARGV[3]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return -math.max(1, (tonumber(first[2]) or now) - now)
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, KEYS[1])
return 1
