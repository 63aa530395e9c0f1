-- `running` the moment the run's container runs, unless it was cancelled
-- meanwhile.
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:events   KEYS[3] channel run:{id}
-- ARGV: now (ms), container id, events maxlen, deadline (ms)
--
-- Returns 'ok', or the status that stops it.
local st = redis.call('HGET', KEYS[1], 'status')
if st ~= 'started' then return st or 'missing' end
redis.call('HSET', KEYS[1], 'status', 'running', 'started_at', ARGV[1],
           'container_id', ARGV[2], 'deadline', ARGV[4])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'type',
           'lifecycle', 'data', '{"status":"running"}', 'ts', ARGV[1])
redis.call('PUBLISH', KEYS[3], 'running')
return 'ok'
