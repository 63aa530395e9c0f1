-- A run is cancelled (opencode_cancel_run).  A run not yet started is
-- cancelled at once: it leaves the tenant's started set and its session's
-- active set, and its keys expire after its retention.  A running one is
-- flagged and the runners are told; a finished one is left alone.
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:events   KEYS[3] run:{id}:diff
-- KEYS[4] tenant:{tenant}:started
-- KEYS[5] session:{sid}:active, of the session the run named when it was
--         read before ('' for none)
-- KEYS[6] channel run:{id}   KEYS[7] channel cancel
-- KEYS[8] channel tenant:{tenant} ("<run id> <status>": the dashboard)
-- KEYS[9] budget:expiry (absent: an older caller)
-- ARGV: tenant, now (ms), run id, events maxlen, retention (s) when the
-- run has none, the session id KEYS[5] is of ('' for none), then the
-- names of the statuses `started`, `running` and `cancelled`
--
-- A run cancelled before it started is listed in budget:expiry as the
-- finish lists one (the bytes run_create counted for it go when its keys
-- do).
--
-- Returns the run hash (HGETALL), or nil (unknown, another tenant's, or
-- not of that session any more: nothing written).
local started, running, cancelled = ARGV[7], ARGV[8], ARGV[9]

local h = redis.call('HMGET', KEYS[1], 'tenant', 'status', 'retention',
                     'session', 'bytes')
if h[1] ~= ARGV[1] or (h[4] or '') ~= ARGV[6] then return nil end

if h[2] == started then
  redis.call('HSET', KEYS[1], 'status', cancelled,
    'finished_at', ARGV[2], 'error', 'cancelled before it started')
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',
    'type', 'lifecycle', 'data', '{"status":"' .. cancelled .. '"}',
    'ts', ARGV[2])
  redis.call('SREM', KEYS[4], ARGV[3])
  if KEYS[5] ~= '' then redis.call('ZREM', KEYS[5], ARGV[3]) end
  local keep = tonumber(h[3]) or tonumber(ARGV[5])
  for _, k in ipairs({KEYS[1], KEYS[2], KEYS[3]}) do
    redis.call('EXPIRE', k, keep)
  end
  if KEYS[9] and tonumber(h[5] or '0') > 0 then
    redis.call('ZADD', KEYS[9], tonumber(ARGV[2]) + keep * 1000,
               ARGV[3] .. ' ' .. h[5] .. ' ' .. ARGV[1])
  end
  redis.call('PUBLISH', KEYS[6], cancelled)
  redis.call('PUBLISH', KEYS[8], ARGV[3] .. ' ' .. cancelled)
elseif h[2] == running then
  if redis.call('HSETNX', KEYS[1], 'cancel_requested', '1') == 1 then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',
      'type', 'lifecycle', 'data', '{"cancelRequested":true}',
      'ts', ARGV[2])
  end
  redis.call('PUBLISH', KEYS[7], ARGV[3])
  redis.call('PUBLISH', KEYS[6], 'cancel')
end
return redis.call('HGETALL', KEYS[1])
