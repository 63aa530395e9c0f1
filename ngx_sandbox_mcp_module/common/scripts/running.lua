-- `running` the moment the run's container runs, unless it was cancelled
-- meanwhile.
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:events   KEYS[3] channel run:{id}
-- KEYS[4] session:{session}:active   KEYS[5] tenant:{tenant}:started
-- KEYS[6] tenant:{tenant}:claimed
-- KEYS[7] channel tenant:{tenant}     (each '' when unknown; "<run id>
--                                     <status>": the dashboard)
-- ARGV: now (ms), container id, events maxlen, deadline (ms), run id
--
-- The reason it waited for the host (run_waiting.lua's `error`) goes.
-- A run that ended meanwhile (cancelled while its sandbox was starting)
-- leaves its session's active set and its tenant's sets: its claim ends
-- here, no finish follows.
--
-- Returns 'ok', or the status that stops it ('missing' when gone).
local st = redis.call('HGET', KEYS[1], 'status')
if st ~= 'started' then
  if st ~= 'running' then
    if KEYS[4] ~= '' then redis.call('ZREM', KEYS[4], ARGV[5]) end
    if KEYS[5] ~= '' then redis.call('SREM', KEYS[5], ARGV[5]) end
    if KEYS[6] ~= '' then redis.call('SREM', KEYS[6], ARGV[5]) end
  end
  return st or 'missing'
end
redis.call('HSET', KEYS[1], 'status', 'running', 'started_at', ARGV[1],
           'container_id', ARGV[2], 'deadline', ARGV[4])
redis.call('HDEL', KEYS[1], 'error')
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'type',
           'lifecycle', 'data', '{"status":"running"}', 'ts', ARGV[1])
redis.call('PUBLISH', KEYS[3], 'running')
if KEYS[7] ~= '' then redis.call('PUBLISH', KEYS[7], ARGV[5] .. ' running') end
return 'ok'
