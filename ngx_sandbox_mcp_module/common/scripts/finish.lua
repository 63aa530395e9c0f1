-- The outcome of a run, once: a run already ended (cancelled before it
-- started) keeps its status.
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:events   KEYS[3] channel run:{id}
-- KEYS[4] run:{id}:diff               ('' when there is no diff)
-- KEYS[5] session:{session}:active    KEYS[6] tenant:{tenant}:started
-- KEYS[7] tenant:{tenant}:claimed     KEYS[8] session:{session}
--                                     (each '' when unknown)
-- KEYS[9] sessions
-- KEYS[10] tenant:{tenant}:sessions   ('' when unknown)
-- KEYS[11] channel tenant:{tenant}    ('' when unknown; "<run id>
--                                     <status>": the dashboard)
-- KEYS[12] tenant:{tenant}:usage      ('' when unknown; absent: an older
--                                     caller, nothing accounted)
-- KEYS[13] budget:expiry
-- KEYS[14] notify                     (absent or '': an older caller,
--                                     no notification scheduled)
-- ARGV: status, now (ms), events maxlen, run id, session id, then
-- field/value pairs for the run hash, then (when KEYS[4] is given) the
-- diff.
--
-- The run leaves its session's active set and both of its tenant's sets
-- (also when it had ended already); its keys expire `retention` seconds
-- later (a field of the run hash; absent: kept); its session was active
-- now, and is due to expire `idle_ttl` seconds later (the session hash's
-- field; absent: the sessions index is left alone); the tenant's session
-- index scores it by that last activity.
--
-- What the run holds is counted now, once: its hash and status events
-- (RUN_BYTES, its task, title, pr title, repositories and its group's
-- run ids: what run_create wrote; run_cancel.lua counts the same) and its
-- outcome (FINISH_BYTES, the fields' values, the diff) are added to the run's
-- `bytes` (which holds its events, counted by the runner as it stored
-- them) and to its tenant's usage `bytes`;
-- a run whose keys expire is listed in budget:expiry, scored by when they
-- do, as "<run id> <its bytes> <tenant>": the runner's janitor takes its
-- bytes off the tenant's usage then (budget_release.lua).
--
-- A run whose hash has `notify_url` (opencode_run_task's notify) is due
-- for its completion notification now: `notify` scores it by when its
-- next attempt is (ms), the runner's notify thread delivers it
-- (docs/runner.md, "Completion notifications").
--
-- Returns 'ok', or the status the run already had.
if KEYS[5] ~= '' then redis.call('ZREM', KEYS[5], ARGV[4]) end
if KEYS[6] ~= '' then redis.call('SREM', KEYS[6], ARGV[4]) end
if KEYS[7] ~= '' then redis.call('SREM', KEYS[7], ARGV[4]) end

local st = redis.call('HGET', KEYS[1], 'status')
if st == 'completed' or st == 'failed' or st == 'cancelled' then
  return st
end

local fv = {'status', ARGV[1], 'finished_at', ARGV[2]}
local last = #ARGV
if KEYS[4] ~= '' then last = last - 1 end
for i = 6, last do fv[#fv + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fv))
if KEYS[4] ~= '' then redis.call('SET', KEYS[4], ARGV[#ARGV]) end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'type',
           'lifecycle', 'data', cjson.encode({status = ARGV[1]}),
           'ts', ARGV[2])
redis.call('PUBLISH', KEYS[3], ARGV[1])
if (KEYS[14] or '') ~= ''
   and redis.call('HEXISTS', KEYS[1], 'notify_url') == 1 then
  redis.call('ZADD', KEYS[14], 'NX', ARGV[2], ARGV[4])
end
if KEYS[11] ~= '' then
  redis.call('PUBLISH', KEYS[11], ARGV[4] .. ' ' .. ARGV[1])
end

local RUN_BYTES, FINISH_BYTES = 1024, 256
local usage, total = KEYS[12] or '', 0
if usage ~= '' then
  local r = redis.call('HMGET', KEYS[1], 'task', 'title', 'pr_title',
                       'repositories', 'group_runs')
  local added = RUN_BYTES + FINISH_BYTES + #(r[1] or '') + #(r[2] or '')
                + #(r[3] or '') + 2 * #(r[4] or '') + #(r[5] or '')
  for i = 6, #ARGV do added = added + #ARGV[i] end
  total = redis.call('HINCRBY', KEYS[1], 'bytes', added)
  redis.call('HINCRBY', usage, 'bytes', added)
end

local h = redis.call('HMGET', KEYS[1], 'retention', 'tenant')
local retention = tonumber(h[1] or '')
if retention and retention >= 1 then
  retention = math.floor(retention)
  redis.call('EXPIRE', KEYS[1], retention)
  redis.call('EXPIRE', KEYS[2], retention)
  if KEYS[4] ~= '' then redis.call('EXPIRE', KEYS[4], retention) end
  if usage ~= '' and h[2] then
    redis.call('ZADD', KEYS[13], tonumber(ARGV[2]) + retention * 1000,
               ARGV[4] .. ' ' .. total .. ' ' .. h[2])
  end
end

if KEYS[8] ~= '' then
  local s = redis.call('HMGET', KEYS[8], 'tenant', 'state', 'idle_ttl')
  if s[1] and not s[2] then
    redis.call('HSET', KEYS[8], 'last_active', ARGV[2])
    if KEYS[10] ~= '' then
      redis.call('ZADD', KEYS[10], tonumber(ARGV[2]), ARGV[5])
    end
    local ttl = tonumber(s[3] or '')
    if ttl and ttl >= 1 then
      redis.call('ZADD', KEYS[9], tonumber(ARGV[2]) + ttl * 1000, ARGV[5])
    end
  end
end

return 'ok'
