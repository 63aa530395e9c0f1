-- An expiring session's workspace is gone: it is `expired`, and its keys
-- live `retention` seconds more (the session hash's field; else ARGV[4]).
--
-- KEYS[1] session:{id}   KEYS[2] session:{id}:runs   KEYS[3] sessions
-- KEYS[4] tenant:{tenant}:usage of the session's tenant ('' or absent:
--         unknown)
-- ARGV: session id, now (ms), runner instance, default retention (s)
--
-- The session leaves its tenant's usage: one less `sessions`, its
-- workspace's bytes off `disk`.
--
-- Returns 'ok', or 'taken' when another runner holds the mark now.
local h = redis.call('HMGET', KEYS[1], 'state', 'expiring_by', 'retention')

if h[1] == 'expiring' and h[2] ~= ARGV[3] then return 'taken' end

if h[1] == 'expiring' then
  local keep = tonumber(h[3] or '')
  if not keep or keep < 1 then keep = tonumber(ARGV[4]) end
  keep = math.floor(keep)
  redis.call('HSET', KEYS[1], 'state', 'expired', 'expired_at', ARGV[2])
  redis.call('HDEL', KEYS[1], 'expiring_by', 'expiring_at')
  redis.call('EXPIRE', KEYS[1], keep)
  redis.call('EXPIRE', KEYS[2], keep)
  local usage, f = KEYS[4] or '', 's:' .. ARGV[1]
  local v = usage ~= '' and redis.call('HGET', usage, f)
  if v then
    redis.call('HDEL', usage, f)
    redis.call('HINCRBY', usage, 'sessions', -1)
    redis.call('HINCRBY', usage, 'disk', -tonumber(v))
  end
end

redis.call('ZREM', KEYS[3], ARGV[1])
return 'ok'
