-- A refresh token family: rotation on use (refresh_token grant) and
-- revocation (RFC 7009).  Only hashes of refresh tokens are stored; a
-- token of the family that is not its live one (spent by a rotation, or
-- forged) revokes the family: the family is deleted and its last access
-- token's id goes to `revoked` (with a PUBLISH, so every worker refuses it
-- at once).
--
-- KEYS[1] oauth:family:{family}   KEYS[2] revoked   KEYS[3] channel revoked
-- ARGV: mode (refresh | revoke), hash of the presented refresh token,
-- client_id, new refresh token hash, new access jti, its exp, now (unix
-- seconds), refresh ttl (seconds), resource ('' when not sent); revoke
-- reads the first two only
--
-- Returns {'OK', sub, repos, key_exp} (refresh), {'OK'} (revoke), or
-- {'ERR', OAuth error, description}.
local function revoke_family()
  local f = redis.call('HMGET', KEYS[1], 'access_jti', 'access_exp')
  if f[1] then
    local old = tonumber(redis.call('HGET', KEYS[2], f[1]))
    if not old or old < tonumber(f[2]) then
      redis.call('HSET', KEYS[2], f[1], f[2])
    end
    redis.call('PUBLISH', KEYS[3], f[1] .. ' ' .. f[2])
  end
  redis.call('DEL', KEYS[1])
end

local all = redis.call('HGETALL', KEYS[1])
local f = {}
for i = 1, #all, 2 do f[all[i]] = all[i + 1] end

if ARGV[1] == 'revoke' then
  if f.current and f.current == ARGV[2] then revoke_family() end
  return {'OK'}
end

local now = tonumber(ARGV[7])

if not f.current then
  return {'ERR', 'invalid_grant', 'unknown, expired or revoked refresh token'}
end
if f.current ~= ARGV[2] or f.client_id ~= ARGV[3] then
  revoke_family()
  return {'ERR', 'invalid_grant',
          'refresh token already used: the grant is revoked'}
end
if ARGV[9] ~= '' and ARGV[9] ~= f.resource then
  return {'ERR', 'invalid_target', 'resource is not this MCP server'}
end
if (tonumber(f.key_exp) or 0) <= now
   or (f.key_jti ~= '' and redis.call('HEXISTS', KEYS[2], f.key_jti) == 1)
then
  redis.call('DEL', KEYS[1])
  return {'ERR', 'invalid_grant', 'the access key has expired or was revoked'}
end

redis.call('HSET', KEYS[1], 'current', ARGV[4], 'access_jti', ARGV[5],
           'access_exp', ARGV[6])
redis.call('EXPIRE', KEYS[1],
           math.min(tonumber(ARGV[8]), tonumber(f.key_exp) - now))
return {'OK', f.sub, f.repos, f.key_exp}
