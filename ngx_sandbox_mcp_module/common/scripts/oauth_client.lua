-- An OAuth client registered (RFC 7591, public: no secret), or a client
-- metadata document cached: anyone may ask for one, so until a sign-in
-- uses it the client counts in the bounded set `unused` (member: its key,
-- score: its expiry) and lives the short ttl it is given here
-- (oauth_code.lua takes it out of the set at its first sign-in).
--
-- KEYS[1] oauth:client:{client_id}   KEYS[2] oauth:unused (zset)
-- ARGV: client name, redirect_uris (a JSON array of strings), now (unix
-- seconds), ttl (seconds), the most clients `unused` may hold
--
-- Returns 1; 0 when the id is taken; -S when `unused` is full (S: the
-- seconds until its soonest entry expires, at least 1).  Nothing is
-- written but 1's (and the removal of `unused`'s expired entries).
local now, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return -math.max(1, (tonumber(first[2]) or now) - now)
end
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'redirect_uris', ARGV[2],
           'created_at', ARGV[3])
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('ZADD', KEYS[2], now + ttl, KEYS[1])
return 1
