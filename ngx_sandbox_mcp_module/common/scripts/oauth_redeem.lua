-- The token endpoint's authorization_code grant: the code is spent on its
-- first use, whatever the outcome; a spent code used again revokes the
-- family of tokens it started (RFC 6749 4.1.2).  On success the refresh
-- family is created.
--
-- KEYS[1] oauth:code:{sha256 hex of the code}
-- KEYS[2] oauth:family:{family} (the family id the module derives from
-- the code)   KEYS[3] revoked   KEYS[4] channel revoked
-- ARGV: client_id, redirect_uri, challenge (S256 of the code_verifier),
-- resource ('' when not sent), now (unix seconds), refresh token hash,
-- access token jti, access token exp, refresh ttl (seconds)
--
-- Returns {'OK', sub, repos, key_exp} or {'ERR', OAuth error, description}.
local now = tonumber(ARGV[5])

local function revoke_family()
  local f = redis.call('HMGET', KEYS[2], 'access_jti', 'access_exp')
  if f[1] then
    local old = tonumber(redis.call('HGET', KEYS[3], f[1]))
    if not old or old < tonumber(f[2]) then
      redis.call('HSET', KEYS[3], f[1], f[2])
    end
    redis.call('PUBLISH', KEYS[4], f[1] .. ' ' .. f[2])
  end
  redis.call('DEL', KEYS[2])
end

local all = redis.call('HGETALL', KEYS[1])
local c = {}
for i = 1, #all, 2 do c[all[i]] = all[i + 1] end

if not c.client_id then
  return {'ERR', 'invalid_grant', 'unknown or expired authorization code'}
end
if c.used then
  revoke_family()
  return {'ERR', 'invalid_grant',
          'authorization code already used: its tokens are revoked'}
end
redis.call('HSET', KEYS[1], 'used', '1')

if (tonumber(c.exp) or 0) <= now then
  return {'ERR', 'invalid_grant', 'authorization code expired'}
end
if c.client_id ~= ARGV[1] then
  return {'ERR', 'invalid_grant',
          'authorization code issued to another client'}
end
if c.redirect_uri ~= ARGV[2] then
  return {'ERR', 'invalid_grant',
          'redirect_uri differs from the authorization request'}
end
if c.challenge ~= ARGV[3] then
  return {'ERR', 'invalid_grant',
          'PKCE verification failed: code_verifier does not match'}
end
if ARGV[4] ~= '' and ARGV[4] ~= c.resource then
  return {'ERR', 'invalid_target', 'resource is not this MCP server'}
end
if (tonumber(c.key_exp) or 0) <= now then
  return {'ERR', 'invalid_grant', 'the access key has expired'}
end
if c.key_jti ~= '' and redis.call('HEXISTS', KEYS[3], c.key_jti) == 1 then
  return {'ERR', 'invalid_grant', 'the access key was revoked'}
end

redis.call('HSET', KEYS[2], 'client_id', c.client_id, 'sub', c.sub,
           'repos', c.repos, 'resource', c.resource, 'key_jti', c.key_jti,
           'key_exp', c.key_exp, 'current', ARGV[6], 'access_jti', ARGV[7],
           'access_exp', ARGV[8])
redis.call('EXPIRE', KEYS[2],
           math.min(tonumber(ARGV[9]), tonumber(c.key_exp) - now))
return {'OK', c.sub, c.repos, c.key_exp}
