-- The token endpoint's grants, each one atomic step on a refresh token
-- family: an authorization code redeemed (mode code), a refresh token
-- rotated (refresh) or revoked (revoke).  Only hashes of codes and refresh
-- tokens are stored.  A code is spent on its first use, whatever the
-- outcome; a spent code used again, or a refresh token of the family that
-- is not its live one (spent by a rotation, or forged), revokes the
-- family: it is deleted and its last access token's id goes to `revoked`
-- (with a PUBLISH, so that every worker refuses it at once).
--
-- KEYS[1] oauth:family:{family} (for a code, the id the module derives
-- from it)   KEYS[2] revoked   KEYS[3] channel revoked
-- KEYS[4] oauth:code:{sha256 hex of the code} (mode code; else '')
-- KEYS[5] revoked:exp (zset: revoked's ids by exp)
-- ARGV: mode (code | refresh | revoke), client_id, proof (code: the S256
-- challenge of the code_verifier; refresh, revoke: the hash of the
-- presented refresh token), resource ('' when not sent), now (unix
-- seconds), new refresh token hash, new access token jti, its exp, refresh
-- ttl (seconds), redirect_uri (code), then (refresh of a GitHub sign-in)
-- '1' once the module looked the user up at GitHub again and its rules
-- still let it in, the grant they give now (repos), the login now (label);
-- revoke reads mode and proof only
--
-- Returns {'OK', sub, repos, key_exp} (code, refresh), {'OK'} (revoke),
-- {'GITHUB', sealed GitHub token, sub} (the refresh of a GitHub sign-in
-- before that look-up: nothing written), or {'ERR', OAuth error,
-- description}.
local mode, now = ARGV[1], tonumber(ARGV[5])

local function fields(key)
  local all = redis.call('HGETALL', key)
  local h = {}
  for i = 1, #all, 2 do h[all[i]] = all[i + 1] end
  return h
end

local function revoke_family()
  local f = redis.call('HMGET', KEYS[1], 'access_jti', 'access_exp')
  if f[1] then
    local old = tonumber(redis.call('HGET', KEYS[2], f[1]))
    if not old or old < tonumber(f[2]) then
      redis.call('HSET', KEYS[2], f[1], f[2])
      redis.call('ZADD', KEYS[5], f[2], f[1])
    end
    redis.call('PUBLISH', KEYS[3], f[1] .. ' ' .. f[2])
  end
  redis.call('DEL', KEYS[1])
end

local function err(e, d) return {'ERR', e, d} end

-- the family (re)made for the grant g, while its access key holds
local function issue(g)
  if (tonumber(g.key_exp) or 0) <= now
     or (g.key_jti ~= '' and redis.call('HEXISTS', KEYS[2], g.key_jti) == 1)
  then
    redis.call('DEL', KEYS[1])
    return err('invalid_grant', 'the access key has expired or was revoked')
  end
  redis.call('HSET', KEYS[1], 'client_id', g.client_id, 'sub', g.sub,
             'repos', g.repos, 'resource', g.resource, 'key_jti', g.key_jti,
             'key_exp', g.key_exp, 'current', ARGV[6], 'access_jti', ARGV[7],
             'access_exp', ARGV[8], 'github', g.github or '',
             'label', g.label or '')
  redis.call('EXPIRE', KEYS[1],
             math.min(tonumber(ARGV[9]), tonumber(g.key_exp) - now))
  return {'OK', g.sub, g.repos, g.key_exp}
end

if mode == 'code' then
  local c = fields(KEYS[4])
  if not c.client_id then
    return err('invalid_grant', 'unknown or expired authorization code')
  end
  if c.used then
    revoke_family()
    return err('invalid_grant',
               'authorization code already used: its tokens are revoked')
  end
  redis.call('HSET', KEYS[4], 'used', '1')
  if (tonumber(c.exp) or 0) <= now then
    return err('invalid_grant', 'authorization code expired')
  end
  if c.client_id ~= ARGV[2] then
    return err('invalid_grant', 'authorization code issued to another client')
  end
  if c.redirect_uri ~= ARGV[10] then
    return err('invalid_grant',
               'redirect_uri differs from the authorization request')
  end
  if c.challenge ~= ARGV[3] then
    return err('invalid_grant',
               'PKCE verification failed: code_verifier does not match')
  end
  if ARGV[4] ~= '' and ARGV[4] ~= c.resource then
    return err('invalid_target', 'resource is not this MCP server')
  end
  return issue(c)
end

local f = fields(KEYS[1])

if mode == 'revoke' then
  if f.current and f.current == ARGV[3] then revoke_family() end
  return {'OK'}
end

if not f.current then
  return err('invalid_grant', 'unknown, expired or revoked refresh token')
end
if f.current ~= ARGV[3] or f.client_id ~= ARGV[2] then
  revoke_family()
  return err('invalid_grant', 'refresh token already used: the grant is revoked')
end
if ARGV[4] ~= '' and ARGV[4] ~= f.resource then
  return err('invalid_target', 'resource is not this MCP server')
end
if (f.github or '') ~= '' then
  -- a GitHub sign-in: who the user is now decides, first
  if ARGV[11] ~= '1' then
    return {'GITHUB', f.github, f.sub}
  end
  f.repos, f.label = ARGV[12], ARGV[13]
end
return issue(f)
