-- An OAuth client registered (RFC 7591, public: no secret), kept for the
-- client TTL.
--
-- KEYS[1] oauth:client:{client_id}
-- ARGV: client name, redirect_uris (a JSON array of strings), created_at
-- (unix seconds), ttl (seconds)
--
-- Returns 1; 0 when the id is taken (nothing written).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'redirect_uris', ARGV[2],
           'created_at', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
