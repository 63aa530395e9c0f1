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
-- KEYS[9] tenant:{tenant}:usage   KEYS[10] budget:expiry (both absent:
--         an older caller)
-- KEYS[11] notify (absent: an older caller; a run with `notify_url`
--         cancelled before it started is due for its notification now,
--         as finish.lua schedules an ended run's)
-- KEYS[12] run:{attempt}, KEYS[13] run:{group} of a pick run (its pr_of
--         and group when it was read before; '' or absent: none): one
--         cancelled before it started undoes its pick (the attempt
--         `pushed` again, the group without `picked`)
-- ARGV: tenant, now (ms), run id, events maxlen, retention (s) when the
-- run has none, the session id KEYS[5] is of ('' for none), then the
-- names of the statuses `started`, `running` and `cancelled`
--
-- A run cancelled before it started holds its hash and events until its
-- keys expire: counted now in its tenant's usage `bytes` (RUN_BYTES, its
-- task, title, pr title, repositories and its group's run ids, as
-- finish.lua counts them) and listed in budget:expiry as the finish lists
-- a run.
--
-- Returns the run hash (HGETALL), or nil (unknown, another tenant's, or
-- not of that session any more: nothing written).
local started, running, cancelled = ARGV[7], ARGV[8], ARGV[9]

local h = redis.call('HMGET', KEYS[1], 'tenant', 'status', 'retention',
                     'session', 'task', 'title', 'pr_title', 'repositories',
                     'group_runs')
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
  if KEYS[10] then
    local RUN_BYTES = 1024
    local n = RUN_BYTES + #(h[5] or '') + #(h[6] or '') + #(h[7] or '')
              + 2 * #(h[8] or '') + #(h[9] or '')
    local total = redis.call('HINCRBY', KEYS[1], 'bytes', n)
    redis.call('HINCRBY', KEYS[9], 'bytes', n)
    redis.call('ZADD', KEYS[10], tonumber(ARGV[2]) + keep * 1000,
               ARGV[3] .. ' ' .. total .. ' ' .. ARGV[1])
  end
  if KEYS[11] and redis.call('HEXISTS', KEYS[1], 'notify_url') == 1 then
    redis.call('ZADD', KEYS[11], 'NX', ARGV[2], ARGV[3])
  end
  -- a pick run (run_pick.lua) cancelled before it started: the pick
  -- undone, for another
  if KEYS[12] and KEYS[12] ~= '' then
    local a = redis.call('HMGET', KEYS[12], 'pr_pick_run', 'group')
    if a[1] == ARGV[3] then
      redis.call('HSET', KEYS[12], 'pr_status', 'pushed')
      redis.call('HDEL', KEYS[12], 'pr_pick_run')
      if a[2] and KEYS[13] ~= '' then redis.call('HDEL', KEYS[13], 'picked') end
    end
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
