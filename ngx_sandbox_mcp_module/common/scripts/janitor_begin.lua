-- An idle session is to expire: mark it `expiring`, atomically, once.
--
-- KEYS[1] session:{id}   KEYS[2] session:{id}:active   KEYS[3] sessions
-- ARGV: session id, now (ms), runner instance, stale (ms)
--
-- It must still be due (its `sessions` score at or before now), and have
-- no unfinished run (session:{id}:active empty).  Another runner's
-- `expiring` mark younger than the stale age means that runner is at it.
-- run_create refuses an expiring session, so no run can start on it
-- meanwhile.
--
-- Returns 'ok' (marked by this runner: remove the volume, then end it),
-- 'orphan' (due, but its hash is gone: remove the volume, then end it),
-- 'not due', 'busy', 'taken', or 'expired' (dropped from `sessions`).
local score = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then return 'not due' end

local h = redis.call('HMGET', KEYS[1], 'tenant', 'state', 'expiring_by',
                     'expiring_at')
if h[2] == 'expired' then
  redis.call('ZREM', KEYS[3], ARGV[1])
  return 'expired'
end
if h[2] == 'expiring' and h[3] ~= ARGV[3]
   and tonumber(ARGV[2]) - tonumber(h[4] or '0') < tonumber(ARGV[4]) then
  return 'taken'
end

if redis.call('ZCARD', KEYS[2]) > 0 then return 'busy' end

if not h[1] then return 'orphan' end

redis.call('HSET', KEYS[1], 'state', 'expiring', 'expiring_by', ARGV[3],
           'expiring_at', ARGV[2])
return 'ok'
