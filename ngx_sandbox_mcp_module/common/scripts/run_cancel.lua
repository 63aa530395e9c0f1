-- A run is cancelled (opencode_cancel_run).  A run not yet started is
-- cancelled at once: it leaves the tenant's active set and its keys expire
-- after its retention.  A running one is flagged and the runners are told;
-- a finished one is left alone.
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:events   KEYS[3] channel run:{id}
-- KEYS[4] channel cancel   KEYS[5] tenant:{tenant}:active
-- KEYS[6] run:{id}:diff
-- ARGV: tenant, now (ms), run id, events maxlen, retention (s) when the
-- run has none
--
-- Returns the run hash (HGETALL), or nil (unknown, or another tenant's).
local h = redis.call('HMGET', KEYS[1], 'tenant', 'status', 'retention')
if h[1] ~= ARGV[1] then return nil end
if h[2] == 'started' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled',
    'finished_at', ARGV[2], 'error', 'cancelled before it started')
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',
    'type', 'lifecycle', 'data', '{"status":"cancelled"}',
    'ts', ARGV[2])
  redis.call('SREM', KEYS[5], ARGV[3])
  local keep = tonumber(h[3]) or tonumber(ARGV[5])
  for _, k in ipairs({KEYS[1], KEYS[2], KEYS[6]}) do
    redis.call('EXPIRE', k, keep)
  end
  redis.call('PUBLISH', KEYS[3], 'cancelled')
elseif h[2] == 'running' then
  if redis.call('HSETNX', KEYS[1], 'cancel_requested', '1') == 1 then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*',
      'type', 'lifecycle', 'data', '{"cancelRequested":true}',
      'ts', ARGV[2])
  end
  redis.call('PUBLISH', KEYS[4], ARGV[3])
  redis.call('PUBLISH', KEYS[3], 'cancel')
end
return redis.call('HGETALL', KEYS[1])
