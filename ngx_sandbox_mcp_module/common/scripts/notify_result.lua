-- A run's completion notification: what one attempt came to (the
-- runner's notify thread, runner/notify.c), and its `notify` event.
--
-- KEYS[1] notify   KEYS[2] run:{id}   KEYS[3] run:{id}:events
-- KEYS[4] channel run:{id}
-- ARGV: run id, the attempt (its notify_attempts), result (delivered |
-- retrying | failed), the next attempt (ms; read only when retrying), the
-- event's data (JSON), now (ms), events maxlen
--
-- delivered and failed (given up): the run leaves `notify` and its hash
-- says so in `notify_status`; retrying: its score in `notify` is the next
-- attempt.  Either way an event of type `notify` is added to the run's
-- events (with the retention the run hash has left, when the stream had
-- none: its keys expire together) and the run's channel is pinged.  The
-- event is not counted in the tenant's usage: the run's bytes were
-- counted, and listed in budget:expiry, when it ended.
--
-- Returns 'ok'; 'stale' (another attempt was claimed since, after this
-- one's lease: nothing written); 'gone' (the run hash is gone, or no
-- hash: dropped from KEYS[1]).  KEYS[3] when no stream: no event.
if redis.call('TYPE', KEYS[2]).ok ~= 'hash' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 'gone'
end

if redis.call('HGET', KEYS[2], 'notify_attempts') ~= ARGV[2] then
  return 'stale'
end

local events = redis.call('TYPE', KEYS[3]).ok

if ARGV[3] == 'retrying' then
  redis.call('ZADD', KEYS[1], 'XX', ARGV[4], ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HSET', KEYS[2], 'notify_status', ARGV[3])
end

if events == 'stream' or events == 'none' then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], '*', 'type', 'notify',
             'data', ARGV[5], 'ts', ARGV[6])
  if redis.call('PTTL', KEYS[3]) == -1 then
    local ttl = redis.call('PTTL', KEYS[2])
    if ttl > 0 then redis.call('PEXPIRE', KEYS[3], ttl) end
  end
  redis.call('PUBLISH', KEYS[4], 'event')
end

return 'ok'
