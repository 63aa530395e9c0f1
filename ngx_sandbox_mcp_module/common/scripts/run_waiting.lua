-- A queued run held back by the host's floor (the runner): why, as its
-- `error` (what opencode_get_result shows) and a lifecycle event, once per
-- reason; running.lua clears it when the run starts.
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:events
-- ARGV: why, now (ms), events maxlen, the name of the status `started`
--
-- Returns 1 (said), 0 (said already, or the run is no longer `started`:
-- nothing written).
local h = redis.call('HMGET', KEYS[1], 'status', 'error')
if h[1] ~= ARGV[4] or h[2] == ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'error', ARGV[1])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'type',
           'lifecycle', 'data', cjson.encode({waiting = ARGV[1]}),
           'ts', ARGV[2])
return 1
