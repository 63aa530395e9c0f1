-- An authorization code issued on the sign-in page: stored under the
-- SHA-256 of the code after checking, in the same step, that the client
-- is still registered with that redirect_uri and that the access key the
-- user signed in with is not revoked.  A sign-in uses the client: it
-- leaves the set of unused clients, and a registered one lives the
-- client ttl from now (a cached metadata document keeps its expiry).
--
-- KEYS[1] oauth:client:{client_id}   KEYS[2] oauth:code:{sha256 hex}
-- KEYS[3] revoked   KEYS[4] oauth:unused (zset of oauth_client.lua)
-- ARGV: client_id, redirect_uri, code_challenge (S256), resource, sub
-- (tenant), repos (the key's grant as JSON text, '' for none), key_jti
-- ('' for none), key_exp, exp (unix seconds), ttl (seconds), the client's
-- ttl from now (seconds; 0: keep its expiry), a GitHub sign-in's sealed
-- GitHub token ('' for none: its refreshes look the user up again), a
-- label ('' for none: the GitHub login)
--
-- Returns the status OK, NOCLIENT (client unknown or expired, or the
-- redirect_uri not one it registered) or REVOKED; nothing written unless
-- OK.
local uris = redis.call('HGET', KEYS[1], 'redirect_uris')
if not uris then
  return redis.status_reply('NOCLIENT')
end
local ok, list = pcall(cjson.decode, uris)
local found = false
if ok and type(list) == 'table' then
  for _, u in ipairs(list) do
    if u == ARGV[2] then found = true end
  end
end
if not found then
  return redis.status_reply('NOCLIENT')
end
if ARGV[7] ~= '' and redis.call('HEXISTS', KEYS[3], ARGV[7]) == 1 then
  return redis.status_reply('REVOKED')
end
redis.call('HSET', KEYS[2], 'client_id', ARGV[1], 'redirect_uri', ARGV[2],
           'challenge', ARGV[3], 'resource', ARGV[4], 'sub', ARGV[5],
           'repos', ARGV[6], 'key_jti', ARGV[7], 'key_exp', ARGV[8],
           'exp', ARGV[9], 'github', ARGV[12], 'label', ARGV[13])
redis.call('EXPIRE', KEYS[2], ARGV[10])
redis.call('ZREM', KEYS[4], KEYS[1])
if tonumber(ARGV[11]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[11])
end
return redis.status_reply('OK')
